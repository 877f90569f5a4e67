"""dctchop for PyTorch: a Dataset over an archive, and DecodeLayer, the decode as two
matrix products (X' = Lt @ C @ R) that PopTorch and the Cerebras PyTorch stack compile for
their devices, and that runs on GPUs and CPUs as it is (in float32; see DecodeLayer for
float16 and bfloat16).

    from dctchop.torch import ArchiveDataset, DecodeLayer
    ds = ArchiveDataset("train.dcz", decode=False)      # coefficient planes, not pixels
    dec = DecodeLayer.for_archive("train.dcz")          # (N, P, Kh, Kw) -> (N, P, H, W)
    x = dec(coeffs)                                     # inside the model, on the device
"""
import json
import math
import operator
import os

import numpy as np
import torch

from . import (Archive, _Batches, _bad_argument, _count, _flag, _identity_of, _out_of_range,
               _path, decode_matrices)
from ._dctchop import _DeviceLoader

_COEFF_NUMPY = {"f16": np.float16, "bf16": None, "f32": np.float32, "i16": np.int16}


def _torch_can_hold(dtype):
    try:
        torch.from_numpy(np.zeros(1, dtype))
        return True
    except TypeError:
        return False


# PyTorch before 2.3 has no uint16, uint32 or uint64 tensors: such arrays widen to the signed
# type that holds every value (uint64 labels when they fit int64).
_WIDER = {np.dtype(t): np.dtype(w) for t, w in
          ((np.uint16, np.int32), (np.uint32, np.int64), (np.uint64, np.int64))
          if not _torch_can_hold(t)}


def _past_int64(a):
    """Whether uint64 array a holds a value above 2**63 - 1, which no signed PyTorch type holds.
    (Compared as uint64: against int64's maximum, NumPy goes through float64, where 2**63 - 1
    rounds up to 2**63 and values up to 2**63 + 1024 passed, to wrap negative.)"""
    return a.dtype.kind == "u" and a.dtype.itemsize == 8 and a.size > 0 and \
        a.max() > np.uint64(np.iinfo(np.int64).max)


def _tensor(a):
    """torch.from_numpy(a), widening the unsigned types PyTorch lacks."""
    a = np.asarray(a)
    if not a.dtype.isnative:  # (PyTorch takes native byte order only)
        a = a.astype(a.dtype.newbyteorder("="))
    wide = _WIDER.get(a.dtype)
    if wide is not None:
        if _past_int64(a):
            raise _bad_argument("uint64 values above 2**63 - 1 have no PyTorch type")
        a = a.astype(wide)
    return torch.from_numpy(a)


def _labels_of(archive):
    """The description of `archive`'s labels side array (name, descr, shape), or None."""
    side = json.loads(archive.info_json()).get("side_arrays") or []
    return next((s for s in side if s["name"] == "labels"), None)


def _refuse_labels_past_int64(archive, shown, advice=""):
    """ArgumentError where `archive`'s labels are uint64 holding values that no PyTorch type
    holds (only a PyTorch without uint64 tensors, before 2.3): refused up front, not at the
    sample or batch that holds the first. Read whole, once: class numbers or ids, seldom
    large."""
    labels = _labels_of(archive)
    if labels is None or labels["descr"] != "<u8" or np.dtype(np.uint64) not in _WIDER:
        return
    if _past_int64(archive.labels()):
        raise _bad_argument(f"{shown}: its uint64 labels hold values above 2**63 - 1, which no "
                            f"PyTorch type holds{advice}")


def coefficient_planes(raw, archive):
    """Raw coefficient bytes of a batch (N, bytes per sample; uint8, as the loader hands them
    out with decode=False) as a float32 tensor (N, P, Kh, Kw); `archive` is the Archive they
    came from, or its path (opened for each call: in a training loop, pass an Archive)."""
    if not isinstance(archive, Archive):
        with Archive(archive) as a:
            return coefficient_planes(raw, a)
    raw = np.ascontiguousarray(raw)
    kh = -(-archive.height // archive.block) * archive.chop
    kw = -(-archive.width // archive.block) * archive.chop
    per_sample = archive.planes * kh * kw * (4 if archive.coeff == "f32" else 2)
    if raw.dtype != np.uint8 or raw.ndim != 2 or raw.shape[1] != per_sample:
        raise _bad_argument(
            f"coefficient_planes takes stored coefficient bytes, uint8 of shape (N, {per_sample}) "
            f"for this archive, not {raw.dtype} of shape {raw.shape}: read them with "
            f"Loader(..., decode=False) or Archive.read_coefficients() of this archive")
    n = raw.shape[0]
    if archive.coeff == "bf16":  # no NumPy bfloat16: widen the bits to float32
        bits = raw.view(np.uint16).astype(np.uint32) << 16
        values = bits.view(np.float32)
    else:
        values = raw.view(_COEFF_NUMPY[archive.coeff]).astype(np.float32)
    return torch.from_numpy(values.reshape(n, archive.planes, kh, kw))  # values is a new array


class DecodeLayer(torch.nn.Module):
    """Decodes coefficient planes (N, P, Kh, Kw) to values (N, P, H, W) with two matrix
    products, plus the archive's offset; float output (round and clamp it for integer data if
    needed; for an f16 archive, clamp to +-65504 before .half(), as the C++ decoder does, or
    an overshoot past f16's range becomes inf).
    The output is planar, (N, P, H, W), whatever the archive's layout: permute it to
    (N, H, W, P) to compare with an NHWC archive's samples. The matrices are buffers, so
    .to(device) moves them with the model. The offset is a buffer too, so a state_dict
    carries it: loading one saved for an archive of another offset (a float archive's mean)
    takes that offset, not the constructor's.

    dtype is that of the matrices and the products. float32 equals the C++ decoder to float
    rounding. float16 and bfloat16 are for devices that multiply in them (PyTorch's CPU has
    no float16 matmul), and cost precision: with float16 matrices u8 values can come out one
    step off after rounding, and with bfloat16 (8 bits of mantissa) the output of float data
    far from zero, offset included, is only good to about 1/256 of its magnitude. Another
    dtype (an integer one, float8, complex) raises TypeError."""

    def __init__(self, block, chop, height, width, offset=0.0, dtype=torch.float32):
        super().__init__()
        if dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            raise TypeError(f"dtype must be a float type (torch.float32, torch.float16, "
                            f"torch.bfloat16, torch.float64), not {dtype!r}")
        try:
            finite = math.isfinite(float(offset))
        except (TypeError, ValueError):
            raise TypeError(f"offset must be a number, not {type(offset).__name__}") from None
        if not finite:  # (NaN made every output NaN)
            raise _bad_argument(f"offset must be a finite number, not {offset}")
        lt, r = decode_matrices(block, chop, height, width)
        self.register_buffer("lt", torch.from_numpy(lt).to(dtype))
        self.register_buffer("r", torch.from_numpy(r).to(dtype))
        # At least float32 (a float archive's mean kept as well as the products allow; no
        # float64, which some devices lack, unless asked for); added to the products, this
        # 0-d tensor takes their dtype, as a Python float would.
        self.register_buffer("offset", torch.tensor(float(offset),
                                                    dtype=torch.promote_types(dtype, torch.float32)))
        self.height, self.width = height, width

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A state saved before the offset was a buffer (2026-12-02) has none: it keeps the
        # layer's own, as BatchNorm fills in what older states lack.
        if prefix + "offset" not in state_dict:
            state_dict[prefix + "offset"] = self.offset.clone()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @classmethod
    def for_archive(cls, archive, dtype=None):
        """The layer that decodes `archive`'s coefficient planes: an Archive, or its path.
        dtype None (the default) is float64 for int32, uint32 and float64 archives, which
        the C++ decoder computes in double (float32, 24 bits, put u32 values near 3e9 up to
        170 off and f64 data near 1e9 lost its fraction), and float32 for the others."""
        def made(a):
            wide = np.dtype(a.dtype) in (np.dtype(np.int32), np.dtype(np.uint32),
                                         np.dtype(np.float64))
            chosen = dtype if dtype is not None else torch.float64 if wide else torch.float32
            return cls(a.block, a.chop, a.height, a.width, a.offset, chosen)
        if isinstance(archive, Archive):
            return made(archive)
        with Archive(archive) as a:
            return made(a)

    def forward(self, c):
        """Coefficient planes (..., Kh, Kw) to values (..., H, W): Lt @ c @ R + offset."""
        want = (self.lt.shape[1], self.r.shape[0])
        if not isinstance(c, torch.Tensor):  # (a NumPy array: "has no attribute 'dim'")
            raise TypeError(f"DecodeLayer takes a torch.Tensor of coefficient planes, not "
                            f"{type(c).__name__} (torch.from_numpy makes one of an array)")
        if c.dim() < 2 or tuple(c.shape[-2:]) != want:
            raise _bad_argument(f"DecodeLayer takes coefficient planes (..., {want[0]}, {want[1]}) "
                                f"for its {self.height}x{self.width} planes, not of shape "
                                f"{tuple(c.shape)}")
        x = torch.matmul(torch.matmul(self.lt, c.to(self.lt.dtype)), self.r)
        return x[..., : self.height, : self.width] + self.offset

    def extra_repr(self):
        return (f"{self.lt.shape[0]}x{self.lt.shape[1]} @ C @ {self.r.shape[0]}x{self.r.shape[1]} "
                f"-> {self.height}x{self.width}, offset {float(self.offset):g}, {self.lt.dtype}")


class ArchiveDataset(torch.utils.data.Dataset):
    """Samples of an archive: decoded (a tensor in the archive's layout, e.g. HWC for NHWC
    images) or, with decode=False, coefficient planes (P, Kh, Kw) for DecodeLayer; with
    labels when the archive has them. `transform` and `target_transform` (callables, as in
    torchvision) are applied to each sample and label. An index is an integer (an int, a
    NumPy integer or a one-value integer tensor; negative from the end). `threads` decodes
    each read on that many threads (1 suits DataLoader workers, which run side by side)."""

    def __init__(self, path, decode=True, transform=None, target_transform=None, threads=1):
        for name, f in (("transform", transform), ("target_transform", target_transform)):
            if f is not None and not callable(f):
                raise TypeError(f"{name} must be a callable or None, not {type(f).__name__}")
        self.decode = _flag("decode", decode)
        self.archive = Archive(path, threads=threads)
        self.transform, self.target_transform = transform, target_transform
        # Read a sample's at a time, not whole: labels may be as large as the data (masks),
        # and a whole copy went to every DataLoader worker in the pickle.
        self._has_labels = _labels_of(self.archive) is not None
        _refuse_labels_past_int64(self.archive, self.archive.path)

    def __len__(self):
        return self.archive.samples

    def _index(self, i):
        try:  # int, NumPy integer, one-value integer tensor (floats and bools refused)
            # (operator.index takes NumPy's and torch's bools as 0 and 1, Python's refuses)
            if isinstance(i, (bool, np.bool_)) or (torch.is_tensor(i) and i.dtype == torch.bool):
                raise TypeError
            given = operator.index(i)
        except TypeError:
            raise TypeError(f"dataset indices are integers, not {type(i).__name__}") from None
        k = given + (len(self) if given < 0 else 0)  # from the end, as for a sequence
        if not 0 <= k < len(self):
            raise _out_of_range(f"sample {given}: out of range; {self.archive.path} has "
                                f"{len(self)} samples")
        return k

    def __getitem__(self, i):
        i = self._index(i)
        x = _tensor(self.archive.read(i, 1)[0]) if self.decode else self._coefficients(i)
        if self.transform is not None:
            x = self.transform(x)
        if not self._has_labels:
            return x
        y = _tensor(self.archive.read_labels(i, 1)[0])
        return x, (y if self.target_transform is None else self.target_transform(y))

    def _coefficients(self, i):
        return coefficient_planes(self.archive.read_coefficients(i, 1), self.archive)[0]


class DeviceLoader(_Batches):
    """Batches decoded on a CUDA device (device=N) or on the host (device=-1), as torch
    tensors shared through DLPack without a copy: (x, labels), x of shape (N, *sample shape)
    in the archive's dtype. Only the coefficients cross PCIe. Shuffling, sharding and resume
    as Loader, and after each batch last_samples and last_epoch as Loader has them. At most `buffers` batches may be held at once (their tensors alive); asking
    for another then raises dctchop.Error instead of waiting. Three by default: the batch in
    use, the one being decoded, and the one before, which Python may still hold while it asks
    for the next (`for i, ((x, y), s) in enumerate(zip(loader, steps))` keeps the last
    result alive while the next is made). `threads` host threads make each batch (read its
    chunks, gather its samples' coefficients): one gathers at a few GB/s, which a GPU that
    decodes at hundreds outruns; the batches are the same for any number."""

    def __init__(self, path, batch_size=32, shuffle=True, seed=0, shuffle_window=4, rank=0,
                 world=1, drop_last=True, prefetch=2, device=-1, buffers=3, threads=1):
        shuffle, drop_last = _flag("shuffle", shuffle, none=True), _flag("drop_last", drop_last)
        batch_size, shuffle_window, rank, world, prefetch, seed = self._options(
            batch_size, shuffle_window, rank, world, prefetch, seed)
        buffers = _count("buffers", buffers, 1, 1024)  # (device_loader::max_buffers)
        threads = _count("threads", threads, 1, 256)  # (loader_options::max_threads)
        device = _count("device", device, -1, 2**31 - 1)  # -1: the host
        path = _path(path)
        with Archive(path) as a:
            kind = a.dtype
            # Labels are made tensors batch by batch, after the loader has moved on: the
            # batch that held the first such label was lost.
            _refuse_labels_past_int64(a, os.fsdecode(path), "; use Loader (NumPy arrays)")
        if np.dtype(kind) in _WIDER:  # DLPack hands the batch over as it is, without a copy
            raise _bad_argument(f"{os.fsdecode(path)} holds {kind} data, which this PyTorch has no tensor type for "
                             f"(DLPack shares the batch without a copy); use ArchiveDataset, which "
                             f"widens it to {_WIDER[np.dtype(kind)]}, or Loader (NumPy arrays)")
        options = dict(batch_size=batch_size, shuffle=shuffle, seed=seed,
                       shuffle_window=shuffle_window, rank=rank, world=world,
                       drop_last=drop_last, prefetch=prefetch, device=device, buffers=buffers,
                       threads=threads)
        super().__init__(_DeviceLoader(path, batch_size, shuffle, seed, shuffle_window, rank,
                                       world, drop_last, prefetch, device, buffers, threads),
                         path, options, _identity_of(path))
        self.last_epoch = None

    def __next__(self):
        self._resumed = False  # a batch taken: a loop after it starts a new epoch
        stream = 0
        if self._l.device >= 0:  # the stream that will use the batch: its buffer is reused after
            stream = torch.cuda.current_stream(self._l.device).cuda_stream
        capsule, labels, samples, epoch = self._l.next(stream)
        self.last_samples = samples.astype(np.int64)  # (torch.as_tensor takes no uint64)
        self.last_epoch = epoch
        y = None if labels is None else _tensor(labels)
        return torch.utils.dlpack.from_dlpack(capsule), y

