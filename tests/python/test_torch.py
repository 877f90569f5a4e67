"""dctchop.torch, run by ctest: DecodeLayer (two matmuls) decodes coefficient planes to the
same values as the C++ decoder, for u8 images (rounded) and f32 fields, every coefficient
type; ArchiveDataset serves decoded samples and coefficient planes with labels.

Usage: test_torch.py DCTCHOP_BINARY SCRATCH_DIR   (PYTHONPATH holds the built package)"""
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

import dctchop
from checks import check, finish
from dctchop.torch import ArchiveDataset, DecodeLayer, coefficient_planes


def compress(binary, src, dst, *args):
    subprocess.run([binary, "compress", src, "-o", dst, "-q", "--no-quality", *args], check=True)


def check_dataloader_workers(dcz):
    """torch's DataLoader with worker processes, after the dataset was read in this process:
    forked workers used to wait forever for this process's OpenMP threads (a multi-threaded
    decode here first), and spawned ones could not pickle the archive. A watchdog ends a
    hang as a failure."""
    ds = ArchiveDataset(dcz)
    want = torch.stack([ds[i][0] for i in range(len(ds))])
    dctchop.Archive(dcz, threads=2).read(0, 12)  # this process's OpenMP pool, before the fork
    for method in ("fork", "spawn"):
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2,
                                             multiprocessing_context=method, timeout=60)
        try:
            got = torch.cat([x for x, _ in loader])
            check(torch.equal(got, want), f"{method}: the workers' samples are the dataset's")
        except RuntimeError as e:  # the timeout: a worker hangs
            check(False, f"{method}: DataLoader workers: {e}")


def _torch_work():
    t = torch.randn(300, 300)
    (t @ t).sum().item()


def check_forked_torch_work(dcz):
    """A process forked (multiprocessing, not a DataLoader worker, which PyTorch runs on one
    thread) after Archive decoded on several threads and PyTorch's own work: PyTorch's work of
    two threads in it waited forever for libgomp threads that only this process has (the
    module's fork handler now ends the forking thread's pool). A watchdog makes a hang a
    failure."""
    import multiprocessing
    dctchop.Archive(dcz, threads=2).read(0, 12)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _torch_work()
        for _ in range(2):
            p = multiprocessing.get_context("fork").Process(target=_torch_work)
            p.start()
            p.join(60)
            hung = p.is_alive()
            if hung:
                p.kill()
                p.join()
            check(not hung and p.exitcode == 0,
                  f"forked PyTorch work after a decode on 2 threads: "
                  f"{'hung' if hung else f'exit {p.exitcode}'}")
            dctchop.Archive(dcz, threads=2).read(0, 12)  # (and decodes again after it)
    finally:
        torch.set_num_threads(threads)


def check_dataset_indices_and_transforms(dcz, ds):
    """Indices as torch code has them (0-d tensors and NumPy integers, negative too), refusals
    that say what an index is, and torchvision's transform and target_transform."""
    n = len(ds)
    for i in (torch.tensor(-1), np.int64(-1), torch.tensor(n - 1)):
        check(torch.equal(ds[i][0], ds[n - 1][0]), f"ds[{i!r}] is the last sample")
    for bad, kind in ((1.0, TypeError), (torch.tensor(1.5), TypeError), (True, TypeError),
                      (np.bool_(True), TypeError), (torch.tensor(True), TypeError),
                      ([0, 1], TypeError), (n, IndexError), (torch.tensor(-n - 1), IndexError)):
        try:
            ds[bad]
            check(False, f"ds[{bad!r}] raised nothing")
        except kind as e:
            check("integer" in str(e) or "out of range" in str(e), f"ds[{bad!r}]: {e}")
    t = ArchiveDataset(dcz, transform=lambda x: x.float() / 2, target_transform=lambda y: int(y) + 1,
                       threads=2)
    x, y = t[2]
    check(x.dtype == torch.float32 and torch.equal(x, ds[2][0].float() / 2), "transform applied")
    check(y == int(ds[2][1]) + 1, f"target_transform applied: {y}")
    try:
        ArchiveDataset(dcz, transform="not callable")
        check(False, "a transform that is not callable raised nothing")
    except TypeError as e:
        check("transform" in str(e), f"transform='not callable': {e}")
    layer = DecodeLayer.for_archive(dctchop.Archive(dcz))  # an Archive, as well as a path
    check(layer.height == 16 and "16x16" in repr(layer), f"DecodeLayer of an Archive: {layer!r}")


def check_types_torch_lacks(binary, d):
    """u16 data and unsigned labels, which PyTorch before 2.3 has no tensors for, come out of
    ArchiveDataset widened (the values unchanged); DeviceLoader, which cannot widen a batch
    it shares without a copy, refuses u16 data by name."""
    from dctchop.torch import DeviceLoader
    u = (np.arange(6 * 16 * 16) % 4096).astype(np.uint16).reshape(6, 16, 16)
    np.save(f"{d}/u.npy", u)
    for labels in (np.arange(6, dtype=np.uint16) * 1000, np.arange(6, dtype=">u8") * 7,
                   np.arange(6, dtype=np.uint32) << 20):
        np.save(f"{d}/ul.npy", labels)
        compress(binary, f"{d}/u.npy", f"{d}/u.dcz", "--labels", f"{d}/ul.npy", "--chop", "8",
                 "--coeff", "f32", "-f")
        ds = ArchiveDataset(f"{d}/u.dcz")
        x, y = ds[4]
        check(torch.equal(x, torch.from_numpy(u[4].astype(np.int32))),
              f"u16 data widened to int32: {x.dtype}")
        check(int(y) == int(labels[4]) and not y.dtype.is_floating_point,
              f"{labels.dtype} labels: {y} ({y.dtype}), want {labels[4]}")
    check(torch.equal(ds[-1][0], ds[5][0]), "ArchiveDataset[-1] is the last sample")
    # A label is the dataset's to keep: an in-place target transform (1-based classes to
    # 0-based) changed the stored one, again every epoch. (int64 labels: PyTorch 2.3 on keeps
    # unsigned ones unsigned, where in-place arithmetic may not be implemented.)
    classes = np.arange(6, dtype=np.int64) * 3 + 1
    np.save(f"{d}/il.npy", classes)
    compress(binary, f"{d}/u.npy", f"{d}/il.dcz", "--labels", f"{d}/il.npy", "-f")
    shifting = ArchiveDataset(f"{d}/il.dcz", target_transform=lambda t: t.sub_(1))
    firsts = [int(shifting[4][1]) for _ in range(3)]
    check(firsts == [classes[4] - 1] * 3, f"in-place target_transform: {firsts}")
    plain = ArchiveDataset(f"{d}/il.dcz")
    # Labels as large as the data (masks) are read a sample's at a time: the dataset held
    # them whole and pickled them into every DataLoader worker.
    images = (np.arange(6 * 64 * 64) % 251).astype(np.uint8).reshape(6, 64, 64)
    masks = images % 3
    np.save(f"{d}/images.npy", images)
    np.save(f"{d}/masks.npy", masks)
    compress(binary, f"{d}/images.npy", f"{d}/m.dcz", "--labels", f"{d}/masks.npy", "-f")
    segmentation = ArchiveDataset(f"{d}/m.dcz")
    size = len(pickle.dumps(segmentation))
    check(size < masks.nbytes // 8, f"an ArchiveDataset pickles to {size} bytes")
    again = pickle.loads(pickle.dumps(segmentation))
    check(all(torch.equal(again[i][1], torch.from_numpy(masks[i])) for i in range(6)),
          "masks read a sample at a time")
    y = plain[4][1]
    y += 100
    check(int(plain[4][1]) == classes[4], "a label handed out shares no memory with the dataset")
    check_dataset_indices_and_transforms(f"{d}/u.dcz", ds)
    # uint64 labels from 2**63 have no PyTorch type: refused, never wrapped to negative (a
    # comparison through float64 let 2**63 .. 2**63 + 1024 pass), and 2**63 - 1 kept.
    if np.dtype(np.uint64) in dctchop.torch._WIDER:
        for top, ok in ((2**63 - 1, True), (2**63, False), (2**63 + 1000, False)):
            labels = np.array([top] * 6, dtype=np.uint64)
            np.save(f"{d}/ul.npy", labels)
            compress(binary, f"{d}/u.npy", f"{d}/big.dcz", "--labels", f"{d}/ul.npy", "-f")
            try:
                y = ArchiveDataset(f"{d}/big.dcz")[0][1]
                check(ok and int(y) == top, f"uint64 label {top}: {y}")
            except ValueError as e:
                check(not ok and "2**63 - 1" in str(e), f"uint64 label {top}: {e}")
            # DeviceLoader refuses them when it is made: batch by batch, the batch that held
            # the first was lost (the loader had moved on when its labels were refused).
            np.save(f"{d}/u8.npy", (u % 256).astype(np.uint8))  # (DeviceLoader refuses u16)
            compress(binary, f"{d}/u8.npy", f"{d}/big8.dcz", "--labels", f"{d}/ul.npy", "-f")
            try:
                dl = DeviceLoader(f"{d}/big8.dcz", batch_size=2, shuffle=False)
                check(ok, f"DeviceLoader took uint64 labels of {top}")
                _, y = next(dl)
                check(int(y[0]) == top, f"DeviceLoader uint64 label {top}: {y}")
                dl.close()
            except ValueError as e:
                check(not ok and "2**63 - 1" in str(e), f"DeviceLoader uint64 label {top}: {e}")
    try:
        ArchiveDataset(f"{d}/u.dcz", decode="False")
        check(False, "ArchiveDataset(decode='False') raised nothing")
    except TypeError as e:
        check("decode must be True or False" in str(e), f"decode='False': {e}")
    try:
        DeviceLoader(f"{d}/u.dcz", device=-2)
        check(False, "DeviceLoader(device=-2) raised nothing")
    except ValueError as e:
        check("device must be at least -1" in str(e), f"device=-2: {e}")
    try:
        DeviceLoader(f"{d}/u.dcz", batch_size=2)
        # (Only a PyTorch with uint16 tensors, 2.3 on, takes it; the module asks PyTorch.)
        check(np.dtype(np.uint16) not in dctchop.torch._WIDER, "DeviceLoader of u16 data: no error")
    except ValueError as e:
        check("uint16" in str(e) and "ArchiveDataset" in str(e), f"DeviceLoader of u16 data: {e}")


def main():
    binary, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    rng = np.random.default_rng(9)
    with tempfile.TemporaryDirectory(dir=scratch) as d:
        # u8 NHWC images, odd size, every coefficient type that holds them; labels.
        x = rng.integers(0, 256, size=(12, 27, 21, 3), dtype=np.uint8)
        np.save(f"{d}/x.npy", x)
        np.save(f"{d}/y.npy", np.arange(12, dtype=np.int32))
        for coeff, chop in (("f16", 4), ("bf16", 2), ("f32", 8), ("i16", 3)):
            dcz = f"{d}/x_{coeff}.dcz"
            compress(binary, f"{d}/x.npy", dcz, "--coeff", coeff, "--chop", str(chop),
                     "--labels", f"{d}/y.npy")
            a = dctchop.Archive(dcz)
            want = a.read(0, a.samples)                     # C++ decode, (N, H, W, C)
            ds = ArchiveDataset(dcz, decode=False)
            planes = torch.stack([ds[i][0] for i in range(len(ds))])
            check(tuple(planes.shape) == (12, 3, 4 * chop, 3 * chop),
                  f"{coeff}: coefficient planes {tuple(planes.shape)}")
            got = DecodeLayer.for_archive(dcz)(planes)       # (N, C, H, W), float
            got = torch.clamp(torch.round(got), 0, 255).permute(0, 2, 3, 1).numpy()
            diff = np.abs(got.astype(int) - want.astype(int))
            # The matmuls sum in another order than the C++ kernels: a value within float
            # rounding of a half may round the other way; nothing else may differ.
            check(diff.max() <= 1 and (diff > 0).mean() < 0.001,
                  f"{coeff}: DecodeLayer vs C++ max {diff.max()}, {(diff > 0).mean():.5f} differ")
            dec = ArchiveDataset(dcz)
            check(np.array_equal(dec[5][0].numpy(), want[5]) and int(dec[5][1]) == 5,
                  f"{coeff}: decoded dataset sample and label")
        # f32 fields: no rounding, agreement to float precision.
        f = rng.normal(0, 10, size=(5, 40, 33)).astype(np.float32)
        np.save(f"{d}/f.npy", f)
        compress(binary, f"{d}/f.npy", f"{d}/f.dcz", "--chop", "5")
        a = dctchop.Archive(f"{d}/f.dcz")
        want = a.read(0, 5)
        planes = torch.stack([ArchiveDataset(f"{d}/f.dcz", decode=False)[i] for i in range(5)])
        got = DecodeLayer.for_archive(f"{d}/f.dcz", dtype=torch.float64)(planes)[:, 0].numpy()
        check(np.allclose(got, want, atol=1e-4), f"f32 fields: max {np.abs(got - want).max()}")
        # u32 counts near 3e9, lossless at chop 8 of 8: the C++ decoder works in double, and so
        # does the layer for_archive makes of a u32, i32 or f64 archive (float32 was its
        # default: values up to 170 off).
        u = (3_000_000_000 + rng.integers(0, 100_000, size=(3, 16, 16))).astype(np.uint32)
        np.save(f"{d}/u.npy", u)
        compress(binary, f"{d}/u.npy", f"{d}/u.dcz", "--chop", "8")
        upl = torch.stack([ArchiveDataset(f"{d}/u.dcz", decode=False)[i] for i in range(3)])
        wide = DecodeLayer.for_archive(f"{d}/u.dcz")
        check(wide.lt.dtype == torch.float64, f"a u32 archive's layer: {wide.lt.dtype}")
        back = torch.round(wide(upl))[:, 0].numpy().astype(np.int64)
        check(np.array_equal(back, u.astype(np.int64)),
              f"u32 through the layer: max {np.abs(back - u.astype(np.int64)).max()} off")
        check(DecodeLayer.for_archive(f"{d}/f.dcz").lt.dtype == torch.float32, "f32: float32")
        check(DecodeLayer.for_archive(f"{d}/u.dcz", dtype=torch.float32).lt.dtype ==
              torch.float32, "a dtype given is the layer's")
        # The offset (here the first sample's mean) travels in the state_dict: a layer made
        # with another offset and given this layer's state decodes as this one does.
        layer = DecodeLayer.for_archive(f"{d}/f.dcz")
        check(abs(float(layer.state_dict()["offset"]) - a.offset) < 1e-5 and a.offset != 0,
              f"state_dict offset {layer.state_dict().get('offset')}, archive's {a.offset}")
        other = DecodeLayer(a.block, a.chop, a.height, a.width, offset=0.0)
        other.load_state_dict(layer.state_dict())
        check(torch.equal(other(planes), layer(planes)), "a loaded state_dict brings its offset")
        # A state saved before the offset was a buffer (no "offset") still loads, strictly,
        # and keeps the layer's own offset.
        old_state = {k: v for k, v in layer.state_dict().items() if k != "offset"}
        fresh = DecodeLayer.for_archive(f"{d}/f.dcz")
        fresh.load_state_dict(old_state)
        check(torch.equal(fresh(planes), layer(planes)), "a state without an offset loads")
        # Integer and complex matrices are refused (integers truncated every entry to 0, and
        # every value decoded to the offset); planes of another size are named as such.
        for bad in (torch.int32, torch.uint8, torch.int64, torch.complex64, np.float32):
            try:
                DecodeLayer.for_archive(f"{d}/f.dcz", dtype=bad)
                check(False, f"DecodeLayer(dtype={bad}) raised nothing")
            except TypeError as e:
                check("dtype must be a float type" in str(e), f"DecodeLayer(dtype={bad}): {e}")
        try:
            layer(planes[..., :-1])
            check(False, "DecodeLayer of planes one column short raised nothing")
        except ValueError as e:
            check(f"(..., {planes.shape[-2]}, {planes.shape[-1]})" in str(e) and
                  "40x33" in str(e), f"DecodeLayer of the wrong planes: {e}")
        # A NaN offset (every output NaN) and a NumPy array ("no attribute 'dim'") are refused
        # with what is wrong.
        for offset, kind in ((float("nan"), ValueError), (float("inf"), ValueError),
                             (None, TypeError), ([1.0], TypeError)):
            try:
                DecodeLayer(8, 4, 13, 11, offset=offset)
                check(False, f"DecodeLayer(offset={offset!r}) raised nothing")
            except kind as e:
                check("offset must be" in str(e), f"DecodeLayer(offset={offset!r}): {e}")
        try:
            layer(planes.numpy())
            check(False, "DecodeLayer of a NumPy array raised nothing")
        except TypeError as e:
            check("takes a torch.Tensor" in str(e), f"DecodeLayer of a NumPy array: {e}")
        # coefficient_planes takes the archive's path as DecodeLayer.for_archive does.
        raw = dctchop.Archive(f"{d}/f.dcz").read_coefficients(0, 5)
        check(torch.equal(coefficient_planes(raw, f"{d}/f.dcz"), planes),
              "coefficient_planes of an archive's path")
        # The device loader on the host: DLPack tensors equal the plain loader's batches.
        from dctchop.torch import DeviceLoader
        dcz = f"{d}/x_f16.dcz"
        dev = DeviceLoader(dcz, batch_size=5, seed=4, device=-1)
        gathered = DeviceLoader(dcz, batch_size=5, seed=4, device=-1, threads=3)
        a_x = dctchop.Archive(dcz)[:]
        plain = dctchop.Loader(dcz, batch_size=5, seed=4)
        for _ in range(5):  # more batches than its three buffers
            xt, yt = next(dev)
            xp, yp = next(plain)
            xg, yg = next(gathered)
            check(torch.equal(xg, xt) and torch.equal(yg, yt),
                  "a batch made on three threads equals the one made on one")
            del xg
            check(xt.dtype == torch.uint8 and tuple(xt.shape) == (5, 27, 21, 3),
                  f"device loader tensor {xt.dtype} {tuple(xt.shape)}")
            check(np.array_equal(xt.numpy(), xp) and np.array_equal(yt.numpy(), yp),
                  "device loader batch equals the loader's")
            check(dev.last_epoch == plain.last_epoch and
                  np.array_equal(dev.last_samples, plain.last_samples),
                  f"device loader epoch {dev.last_epoch}, loader's {plain.last_epoch}")
            del xt
        # enumerate(zip(...)) keeps its previous result while it asks for the next batch:
        # three buffers by default hold that one, the one in use and the next (two raised).
        with DeviceLoader(dcz, batch_size=2, seed=4, device=-1) as zipped:
            steps = sum(1 for _step, ((_x, _y), _) in enumerate(zip(zipped, range(100))))
            check(steps == len(zipped) >= 4, f"zip over a DeviceLoader: {steps} of {len(zipped)} steps")
        # A pickled DeviceLoader goes on where it stands, as a pickled Loader does.
        twin = pickle.loads(pickle.dumps(dev))
        for _ in range(3):
            xt, _ = next(dev)
            xc, _ = next(twin)
            check(type(twin) is DeviceLoader and torch.equal(xt, xc) and
                  np.array_equal(dev.last_samples, twin.last_samples),
                  "a pickled DeviceLoader gives the original's next batches")
            del xt, xc
        twin.close()
        check_dataloader_workers(f"{d}/x_f16.dcz")
        check_forked_torch_work(f"{d}/x_f16.dcz")
        check_types_torch_lacks(binary, d)
        # coefficient_planes of decoded values (decode=False forgotten) says what it takes.
        try:
            coefficient_planes(next(dctchop.Loader(dcz, batch_size=4))[0], dctchop.Archive(dcz))
            check(False, "coefficient_planes of decoded values raises")
        except ValueError as e:
            check("decode=False" in str(e), f"coefficient_planes message: {e}")
        check(dev.epoch_order(0).shape == (10,), "DeviceLoader.epoch_order: 2 batches of 5")
        # A state whose numbers became 0-d tensors (a checkpoint's dict, torch.save'd with
        # torch.tensor values) restores: it raised "Object of type Tensor is not JSON
        # serializable".
        l1 = dctchop.Loader(dcz, batch_size=5, seed=3)
        next(l1)
        as_tensors = {k: torch.tensor(v) if isinstance(v, int) and not isinstance(v, bool) and
                      v < 2**63 else v for k, v in l1.state().items()}
        l2 = dctchop.Loader(dcz, batch_size=5)
        l2.restore(as_tensors)
        check(l2.state() == l1.state(), f"a state of 0-d tensors: {l2.state()} != {l1.state()}")
        l1.close()
        l2.close()
        # Every epoch restore() takes (a u64), epoch_order takes too.
        check(dev.epoch_order(2**64 - 1).shape == (10,), "epoch_order of epoch 2**64 - 1")
        try:
            DeviceLoader(dcz, batch_size=5, buffers=1025)
            check(False, "DeviceLoader(buffers=1025) raised nothing")
        except ValueError as e:
            check("buffers must be at most 1024" in str(e), f"buffers=1025: {e}")
        # Indices as torch takes them; close() as Loader's, the tensors handed out kept.
        check(torch.as_tensor(dev.last_samples).dtype == torch.int64, "last_samples as a tensor")
        own = f"{d}/closing.dcz"  # a file of its own, to see its descriptor go
        shutil.copyfile(dcz, own)

        def open_on(path):
            fds = os.listdir("/proc/self/fd")
            return sum(os.path.realpath(f"/proc/self/fd/{f}") == os.path.realpath(path)
                       for f in fds if os.path.exists(f"/proc/self/fd/{f}"))

        # Threads that stay once started (OpenMP's pool, torch's) start in a first loader:
        # counted before one had run, they failed the count below now and then.
        with DeviceLoader(own, batch_size=5, seed=4, device=-1) as warm:
            next(warm)
        tasks = len(os.listdir("/proc/self/task"))
        with DeviceLoader(own, batch_size=5, seed=4, device=-1) as closing:
            kept, _ = next(closing)
            kept_idx = closing.last_samples.copy()
            # (Its reading thread may have read all and ended by now: only the file is sure.)
            check(open_on(own) == 1,
                  f"an open DeviceLoader: {open_on(own)} descriptors on its file")
        # Closed while its batch is held: the thread and the file go now, the batch stays.
        check(closing.closed and open_on(own) == 0 and len(os.listdir("/proc/self/task")) <= tasks,
              f"closed with a batch held: {open_on(own)} descriptors, "
              f"{len(os.listdir('/proc/self/task'))} threads, {tasks} before")
        check(np.array_equal(kept.numpy(), a_x[kept_idx]), "a device batch outlives its closed loader")
        for use in (lambda: next(closing), closing.state, lambda: closing.epoch_order(0)):
            try:
                use()
                check(False, "a closed DeviceLoader raises")
            except ValueError as e:
                check("closed" in str(e), f"closed DeviceLoader: {e}")
        # The decode matrices have the shapes of DESIGN.md.
        lt, r = dctchop.decode_matrices(8, 4, 28, 28)
        check(lt.shape == (32, 16) and r.shape == (16, 32), f"matrices {lt.shape} {r.shape}")
        lt16, r16 = dctchop.decode_matrices(8, 4, 28, 28, dtype=np.float16)
        check(lt16.dtype == np.float16 and np.array_equal(lt16, lt.astype(np.float16)) and
              r16.dtype == np.float16, "f16 decode matrices are the f64 ones rounded")
    return finish("dctchop.torch")


if __name__ == "__main__":
    sys.exit(main())
