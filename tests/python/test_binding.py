"""The Python binding (`import dctchop`), run by ctest: archives read as NumPy arrays equal
what `dctchop decompress` writes, and the loader iterates epochs, shards and resumes.

Usage: test_binding.py DCTCHOP_BINARY SCRATCH_DIR   (PYTHONPATH holds the built package)"""
import copy
import errno
import io
import json
import os
import pathlib
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import dctchop
from checks import check, finish


def raises(kind, fn, *texts):
    """fn() raises `kind` whose message holds every text; returns the exception."""
    try:
        fn()
    except kind as e:
        for t in texts:
            check(t in str(e), f"{kind.__name__} message lacks {t!r}: {e}")
        return e
    except Exception as e:  # noqa: BLE001 - the wrong kind is the failure reported
        check(False, f"expected {kind.__name__}, got {type(e).__name__}: {e}")
        return None
    check(False, f"expected {kind.__name__}, nothing raised")
    return None


def check_python_habits(d, back, y):
    """What a Python user expects of files, sequences and arguments."""
    path = f"{d}/a.dcz"
    # Paths of any kind; a missing file is FileNotFoundError.
    a = dctchop.Archive(pathlib.Path(path))
    check(a.shape == (37, 20, 18, 3), f"shape is a tuple: {a.shape!r}")
    raises(FileNotFoundError, lambda: dctchop.Archive(f"{d}/missing.dcz"), "missing.dcz")
    raises(FileNotFoundError, lambda: dctchop.Loader(f"{d}/missing.dcz"), "missing.dcz")
    # A sequence: len, indexing from either end, slices.
    check(len(a) == 37, f"len {len(a)}")
    check(np.array_equal(a[0], back[0]) and np.array_equal(a[-1], back[36]), "a[0] and a[-1]")
    # Any index with __index__, as a list takes it (ArchiveDataset did), but a bool.
    check(np.array_equal(a[np.array(3)], back[3]) and np.array_equal(a[np.uint8(4)], back[4]),
          "a[np.array(3)]")
    for bad in (True, np.bool_(False), np.array(True), np.array([1]), 1.0):
        raises(TypeError, lambda: a[bad], "archive indices are integers or slices")
    # read and the rest take the same (Loader's counts too).
    check(np.array_equal(a.read(np.array(3), np.array(2)), back[3:5]) and
          np.array_equal(a.read_coefficients(np.array(3)), a.read_coefficients(3)),
          "read(np.array(3), np.array(2))")
    raises(TypeError, lambda: a.read(np.array(True)), "first must be an integer")
    raises(TypeError, lambda: dctchop.Loader(path, batch_size=np.array(True)),
           "batch_size must be an integer")
    check(len(dctchop.Loader(path, batch_size=np.array(4))) ==
          len(dctchop.Loader(path, batch_size=4)), "batch_size=np.array(4)")
    # rank and world too, and the DeviceLoader's (a '>=' between an __index__ object and an
    # int was Python's own TypeError).

    class Index:
        def __init__(self, v):
            self.v = v

        def __index__(self):
            return self.v
    ranked = dctchop.Loader(path, batch_size=Index(2), rank=Index(1), world=Index(2))
    check(ranked.state()["rank"] == 1 and ranked.state()["world"] == 2, f"{ranked.state()}")
    check(pickle.loads(pickle.dumps(ranked)).state() == ranked.state(), "pickled with ints")
    # A message is one line: a newline of a name is escaped, as the command prints it; the
    # filename is the name itself.
    e = raises(FileNotFoundError, lambda: dctchop.Archive(f"{d}/a\nb.dcz"))
    check(e is not None and "\n" not in str(e) and "a\\nb.dcz: cannot open" in str(e) and
          e.filename == f"{d}/a\nb.dcz", f"{e!r}")
    check(np.array_equal(a[3:7], back[3:7]), "a[3:7]")
    check(np.array_equal(a[35:99], back[35:]), "a slice past the end stops at the end")
    check(a[37:].shape == (0, 20, 18, 3) and a[40:50].shape[0] == 0, "slices at the end are empty")
    raises(IndexError, lambda: a[37], "sample 37", "37 samples")
    raises(IndexError, lambda: a[-38], "sample -38")
    raises(IndexError, lambda: a.read(37), "sample 37", "0 to 36")
    raises(IndexError, lambda: a.read(-1), "sample -1")
    raises(ValueError, lambda: a.read(0, -2), "count")
    raises(IndexError, lambda: a.read_coefficients(30, 10), "samples 30 to 39")
    # info_json() describes the file this Archive holds open, even once another file has
    # taken its name (it reopened the name, describing the newcomer beside the old data).
    shutil.copy(path, f"{d}/held.dcz")
    held = dctchop.Archive(f"{d}/held.dcz")
    dctchop.compress(np.zeros((5, 16, 16), np.uint8), f"{d}/other.dcz")
    os.replace(f"{d}/other.dcz", f"{d}/held.dcz")
    info = json.loads(held.info_json())
    check(info["shape"] == [37, 20, 18, 3] and len(held) == 37,
          f"info_json() of a renamed-over archive describes {info['shape']}")
    held.close()
    # Pickled (for DataLoader workers started with spawn): reopened by path.
    b = pickle.loads(pickle.dumps(a))
    check(np.array_equal(b.read(2, 3), back[2:5]), "an unpickled archive reads the same")
    # Closed by close() or a with block; the header stays readable.
    with dctchop.Archive(path, threads=1) as c:
        check(np.array_equal(c[4], back[4]), "read in a with block (one thread)")
    check(c.closed and c.samples == 37, "closed after the with block, header kept")
    raises(dctchop.ArgumentError, lambda: c.read(0), "closed")
    raises(ValueError, lambda: c.labels(), "closed")
    # Errors: a kind, the built-in classes, clear messages for bad arguments.
    e = raises(dctchop.Error, lambda: dctchop.Loader(path, batch_size=100), "too few samples",
               "drop_last off")
    check(e is not None and isinstance(e, ValueError) and e.kind == "invalid_argument",
          f"a bad option is a ValueError of kind invalid_argument: {e!r}")
    e = raises(ValueError, lambda: dctchop.Loader(path, batch_size=0), "batch_size must be at least 1")
    check(isinstance(e, dctchop.Error) and e.kind == "invalid_argument",
          f"an argument checked in Python is a dctchop.Error too: {e!r}")
    raises(ValueError, lambda: dctchop.Loader(path, batch_size=-1), "batch_size")
    raises(ValueError, lambda: dctchop.Loader(path, world=0), "world must be at least 1")
    raises(ValueError, lambda: dctchop.Loader(path, rank=2, world=2), "rank 2")
    raises(ValueError, lambda: dctchop.Loader(path, seed=-1), "seed")
    raises(ValueError, lambda: dctchop.Archive(path, threads=-1), "threads")
    raises(TypeError, lambda: dctchop.Loader(path, batch_size="8"), "batch_size must be an integer")
    raises(ValueError, lambda: dctchop.decode_matrices(8, 4, 0, 28),
           "height must be at least 1, not 0")
    raises(ValueError, lambda: dctchop.decode_matrices(8, 4, 28, 0),
           "width must be at least 1, not 0")
    # Matrices of integers would be 0 (every value decoded to the offset), without a word.
    for bad in (np.int32, np.uint8, np.complex64, "i8", object):
        raises(TypeError, lambda: dctchop.decode_matrices(8, 4, 28, 28, dtype=bad),
               "dtype must be a float type")
    # Sizes whose matrices cannot be made: a clear ValueError (2**33 wrapped to an empty
    # matrix and crashed; 2**31 was pybind's "larger than max_size()", 100000 a MemoryError).
    for h, w in ((2**33, 8), (2**31, 8), (100000, 100000), (8, 2**62)):
        raises(ValueError, lambda: dctchop.decode_matrices(8, 4, h, w), "too large")
    # Wrong types and sizes say what they are, in the package's words (not pybind11's).
    raises(TypeError, lambda: dctchop.Loader(path, shuffle="no"), "shuffle must be True or False")
    raises(TypeError, lambda: dctchop.Loader(path, drop_last=2), "drop_last must be True or False")
    raises(ValueError, lambda: dctchop.Loader(path, world=2**31), "world must be at most")
    raises(ValueError, lambda: dctchop.decode_matrices(8, 4, -1, 28), "height must be at least 1")
    with dctchop.Archive(path) as arch:
        raises(TypeError, lambda: arch.read(1.5), "first must be an integer, not float")
        # A NumPy uint64 just past a bound is compared exactly (through float64 it passed,
        # for pybind's "incompatible function arguments").
        raises(ValueError, lambda: arch.read(0, np.uint64(2**63)), "count must be at most")
        raises(IndexError, lambda: arch.read(2**63), "out of range")
        raises(IndexError, lambda: arch.read_coefficients(-2**70), "out of range")
        raises(ValueError, lambda: arch.read(0, -1), "count must be at least 0")
    check(len(dctchop.Loader(path, batch_size=4, shuffle=None, drop_last=0)) == 10,
          "shuffle=None and drop_last=0 are False, as torch takes them")
    # None for decode handed out coefficients (drop_last has no None in torch either).
    raises(TypeError, lambda: dctchop.Loader(path, decode=None), "decode must be True or False")
    raises(TypeError, lambda: dctchop.Loader(path, drop_last=None),
           "drop_last must be True or False")
    # A state resumes only the same kind of loader, and says what a state is.
    l4 = dctchop.Loader(path, batch_size=4, seed=3)
    next(l4)
    st = l4.state()
    check((st["batch_size"], st["world"], st["samples"]) == (4, 1, 37), f"state {st}")
    l8 = dctchop.Loader(path, batch_size=8, seed=3)
    raises(ValueError, lambda: l8.restore(st), "batch_size 4", "batch_size 8")
    raises(TypeError, lambda: l8.restore("garbage"), "the dict that state() returned")
    raises(ValueError, lambda: l8.restore({"epoch": 0}), "not a loader state", "position")
    # Nested past any state: said so (not "this is not JSON"), deeper than Python's json
    # goes too (a bare RecursionError).
    nested = []
    for _ in range(255):
        nested = [nested]
    raises(ValueError, lambda: l8.restore(dict(st, x=nested)), "more than 256 deep")
    for _ in range(5000):
        nested = [nested]
    raises(ValueError, lambda: l8.restore(dict(st, x=nested)), "more than 256 deep")
    raises(ValueError, lambda: l4.restore(dict(st, position=99)), "batch 99")
    # PyTorch's checkpoint names: state_dict() and load_state_dict() are state() and restore().
    again = dctchop.Loader(path, batch_size=4, seed=3)
    again.load_state_dict(l4.state_dict())
    check(again.state_dict() == st and np.array_equal(next(again)[0], next(l4)[0]),
          "load_state_dict(state_dict()) goes on where the loader stood")
    raises(ValueError, lambda: l8.load_state_dict(st), "batch_size 4")
    # epoch() ends at the epoch's end even when restore() moves the loader within it.
    l5 = dctchop.Loader(path, batch_size=5, seed=1, threads=2)
    count = 0
    for i, _ in enumerate(l5.epoch()):
        count += 1
        if i == 1:
            l5.restore(dict(l5.state(), position=5))
    check(count == 4 and l5.state()["epoch"] == 1, f"{count} batches, then {l5.state()}")
    # set_epoch(k): the start of epoch k, in epoch k's order (a loader made anew each epoch,
    # in a DataLoader worker, began at epoch 0 every time).
    fresh = dctchop.Loader(path, batch_size=5, seed=1)
    fresh.set_epoch(2)
    got = [int(s) for _, _ in fresh for s in fresh.last_samples]
    want = [int(s) for s in l5.epoch_order(2)][:len(got)]
    check(got == want and len(got) == 5 * len(fresh) and fresh.state()["epoch"] == 3,
          f"set_epoch(2): {got} against {want}, then {fresh.state()}")
    check(list(l5.epoch_order(2)) != list(l5.epoch_order(0)), "epochs differ in order")
    raises(ValueError, lambda: fresh.set_epoch(-1), "epoch")
    fresh.close()
    order = l5.epoch_order(0)
    check(len(order) == 35 and len(set(order.tolist())) == 35 and order.max() < 37,
          f"epoch_order: 7 batches of 5 distinct samples: {order}")
    # Sample indices are int64 (torch.as_tensor takes no uint64).
    check(order.dtype == np.int64 and l5.last_samples.dtype == np.int64,
          f"index dtypes {order.dtype} {l5.last_samples.dtype}")
    # A state saved through NumPy (np.savez gives NumPy scalars back) restores.
    np.savez(f"{d}/state.npz", **l4.state())
    with np.load(f"{d}/state.npz") as z:
        saved = {k: z[k][()] for k in z.files}
    l6 = dctchop.Loader(path, batch_size=4, seed=0)
    l6.restore(saved)
    check(l6.state() == l4.state(), f"a state of NumPy scalars: {l6.state()} != {l4.state()}")
    # Slices with a step, as for a list.
    for sl in (slice(None, None, 3), slice(30, 2, -4), slice(None, None, -1), slice(5, 5, 2)):
        check(np.array_equal(a[sl], back[sl]), f"a[{sl}]")
    # Names the file system holds that are not UTF-8, as bytes or as os.fsdecode gives them.
    odd = os.path.join(os.fsencode(d), b"lat\xe9.dcz")
    with open(path, "rb") as src, open(odd, "wb") as dst:
        dst.write(src.read())
    for name in (odd, os.fsdecode(odd), pathlib.Path(os.fsdecode(odd))):
        with dctchop.Archive(name) as o:
            check(np.array_equal(o[1], back[1]) and o.path == os.fsdecode(odd), f"{name!r}: {o.path!r}")
    e = raises(FileNotFoundError, lambda: dctchop.Archive(odd + b".missing"), "lat\\xe9.dcz.missing")
    # Out of range, such a name reads as \xe9 too: read() raised UnicodeDecodeError in place of
    # SampleIndexError, and a[99] showed a lone surrogate (\udce9) that cannot be printed.
    with dctchop.Archive(odd) as o:
        for bad in (lambda: o.read(999), lambda: o.read_coefficients(999), lambda: o[999]):
            raises(IndexError, bad, "out of range; ", "lat\\xe9.dcz has")
    raises(ValueError, lambda: dctchop.Archive(path + "\0.npy"), "embedded null byte")
    raises(ValueError, lambda: dctchop.Archive(""), "empty path")
    raises(TypeError, lambda: dctchop.Archive(3), "not int")
    # An unpickled archive opens the same file from another folder (a spawned worker's).
    here = os.getcwd()
    rel = dctchop.Archive(os.path.relpath(path))
    os.chdir(d)
    try:
        moved = pickle.loads(pickle.dumps(rel))
        check(np.array_equal(moved[0], back[0]), "the same archive after chdir")
        check(moved.path == rel.path, f"shown by the path as given: {moved.path!r}")
        rel.close()
        check(pickle.loads(pickle.dumps(rel)).closed, "a closed archive comes back closed")
        # ... from its header alone: its file may be gone since (or another file there).
        shutil.copy(path, f"{d}/gone.dcz")
        gone = dctchop.Archive(f"{d}/gone.dcz")
        gone.close()
        os.remove(f"{d}/gone.dcz")
        for twin in (pickle.loads(pickle.dumps(gone)), copy.deepcopy(gone)):
            check(twin.closed and twin.path == gone.path and twin.shape == gone.shape and
                  twin.samples == gone.samples and twin.dtype == gone.dtype and
                  twin.chop == gone.chop and twin.coeff == gone.coeff and
                  twin.offset == gone.offset, f"a closed archive's copy without its file: {twin!r}")
            raises(dctchop.ArgumentError, lambda: twin.read(0), "closed")
        # Another archive renamed over it since (compress with overwrite=True): the copy
        # refused it, where it read the new file's samples (with an ArchiveDataset's old
        # labels and length, in a spawned DataLoader worker). Same shape, sample count and
        # dtype: only the index's checksums tell the two apart.
        x = np.arange(4 * 8 * 8, dtype=np.uint8).reshape(4, 8, 8)
        dctchop.compress(x, f"{d}/swap.dcz", labels=np.arange(4))
        swapped = dctchop.Archive(f"{d}/swap.dcz")
        same = pickle.dumps(swapped)
        check(np.array_equal(pickle.loads(same)[3], swapped[3]), "unchanged: the same archive")
        dctchop.compress(255 - x, f"{d}/new.dcz", labels=np.arange(4) + 10)
        os.replace(f"{d}/new.dcz", f"{d}/swap.dcz")
        # (At the first read, not while unpickling: a DataLoader worker that failed there died
        # with "exited unexpectedly", the error lost.)
        stale = pickle.loads(same)
        for read in (lambda: stale[0], lambda: stale.read(0), lambda: stale.labels(),
                     lambda: stale.read_coefficients(1), lambda: stale.read_labels(0)):
            e = raises(dctchop.Error, read, "swap.dcz: another archive has its name since this "
                       "Archive was pickled")
            check(e is not None and e.kind == "bad_input", f"kind: {e and e.kind}")
        swapped.close()
        # A Loader's copy the same (its unpickling raised ArgumentError where the new file
        # had other samples, killing a spawned worker; with as many, it read the new file),
        # and where the file is gone; an unchanged file's copy goes on where the loader stood.
        dctchop.compress(x, f"{d}/lswap.dcz", labels=np.arange(4))
        loader = dctchop.Loader(f"{d}/lswap.dcz", batch_size=2, shuffle=False)
        next(loader)
        twin = pickle.loads(pickle.dumps(loader))
        check(np.array_equal(next(twin)[1], [2, 3]), "an unchanged file's copy goes on")
        twin.close()
        kept = pickle.dumps(loader)
        for replacement in (255 - x, np.concatenate([x, x])):
            dctchop.compress(replacement, f"{d}/lnew.dcz", labels=np.arange(len(replacement)))
            os.replace(f"{d}/lnew.dcz", f"{d}/lswap.dcz")
            stale = pickle.loads(kept)  # (no error here)
            check(len(stale) == 2, f"len() of a stale copy: {len(stale)}")
            for use in (lambda: next(stale), lambda: stale.state()):
                # (a ValueError, as bad input is: it was a plain dctchop.Error)
                e = raises(dctchop.ArgumentError, use, "lswap.dcz: another archive has its "
                           "name since this Loader was pickled")
                check(e is not None and e.kind == "bad_input" and isinstance(e, ValueError),
                      f"kind: {e and e.kind}")
            stale.close()
            check(stale.closed, "a stale copy closes")
        with dctchop.Archive(f"{d}/lswap.dcz") as a:
            archive_kept = pickle.dumps(a)
        os.remove(f"{d}/lswap.dcz")
        # (An Archive's copy raised FileNotFoundError while unpickling: a spawned DataLoader
        # worker died of it, "exited unexpectedly".)
        gone = pickle.loads(archive_kept)
        check(gone.samples == 8, f"a gone archive's copy keeps its header: {gone.samples}")
        # Of the open's class too (a tester's find: a plain dctchop.Error, which `except
        # FileNotFoundError` around a DataLoader missed), with its errno.
        e = raises(FileNotFoundError, lambda: gone[0], "lswap.dcz: cannot be opened again for "
                   "this Archive's copy")
        check(e is not None and e.kind == "io" and e.errno == errno.ENOENT and
              isinstance(e, dctchop.FileError), f"kind: {e and e.kind}, errno {e and e.errno}")
        # Its filename the name its message shows (a str), not the bytes it was opened by.
        check(e is not None and e.filename == f"{d}/lswap.dcz" and
              str(e).startswith(e.filename), f"filename {e and e.filename!r}")
        stale = pickle.loads(kept)
        e = raises(FileNotFoundError, lambda: next(stale), "lswap.dcz: cannot be opened again "
                   "for this Loader's copy")
        check(e is not None and e.kind == "io" and e.errno == errno.ENOENT,
              f"kind: {e and e.kind}, errno {e and e.errno}")
        check(e is not None and isinstance(e.filename, str) and e.filename.endswith("lswap.dcz")
              and str(e).startswith(e.filename), f"filename {e and e.filename!r}")
        loader.close()
        # Labels a few rows at a time, as ArchiveDataset reads them; a damaged labels array
        # is found at the first read.
        dctchop.compress(x, f"{d}/lab.dcz", labels=np.arange(40).reshape(4, 10) * 3)
        with dctchop.Archive(f"{d}/lab.dcz") as a:
            check(np.array_equal(a.read_labels(1, 2), np.arange(10, 30).reshape(2, 10) * 3),
                  "read_labels(1, 2)")
            check(a.read_labels(4, 0).shape == (0, 10), "read_labels(4, 0)")
            raises(IndexError, lambda: a.read_labels(3, 2), "samples 3 to 4: out of range")
        with dctchop.Archive(f"{d}/swap.dcz") as a:
            check(a.read_labels(0) is not None, "labels")
        dctchop.compress(x, f"{d}/nolab.dcz")
        with dctchop.Archive(f"{d}/nolab.dcz") as a:
            check(a.read_labels(0) is None, "no labels: None")
        blob = bytearray(open(f"{d}/lab.dcz", "rb").read())
        where = blob.find((np.arange(40) * 3).astype("<i8").tobytes())
        check(where > 0, "the labels' bytes are in the archive")
        blob[where + 8 * 35] ^= 1  # sample 3's
        open(f"{d}/lab_bad.dcz", "wb").write(bytes(blob))
        with dctchop.Archive(f"{d}/lab_bad.dcz") as a:
            e = raises(dctchop.Error, lambda: a.read_labels(3), "labels")
            check(e is not None and e.kind == "corrupt", f"kind: {e and e.kind}")
    finally:
        os.chdir(here)
    # Thread counts beyond any machine are an error, not a crash.
    raises(ValueError, lambda: dctchop.Archive(path, threads=100000), "threads must be at most 4096")
    raises(ValueError, lambda: dctchop.Loader(path, threads=100000), "threads must be at most 4096")


def check_compress_from_python(binary, d, x, y):
    """dctchop.compress of arrays in memory writes what the command writes of the same data
    saved as .npy, labels included; bad data and options raise as the command exits."""
    np.save(f"{d}/cx.npy", x)
    subprocess.run([binary, "compress", f"{d}/cx.npy", "-o", f"{d}/cli.dcz", "-q", "--chop", "2"],
                   check=True)
    report = dctchop.compress(x, pathlib.Path(f"{d}/py.dcz"), chop=2, labels=y)
    check(report["chop"] == 2 and report["source"] == "<array>" and
          report["labels_source"] == "<labels>", f"report {report}")
    cli = json.loads(subprocess.run([binary, "info", f"{d}/cli.dcz", "--json"], check=True,
                                    capture_output=True, text=True).stdout)
    check(report["quality"]["psnr_db"] == cli["quality"]["psnr_db"],
          f"PSNR {report['quality']['psnr_db']} from Python, {cli['quality']['psnr_db']} from the command")
    with dctchop.Archive(f"{d}/py.dcz") as a, dctchop.Archive(f"{d}/cli.dcz") as b:
        check(np.array_equal(a[:], b[:]), "the archive from Python decodes as the command's")
        check(np.array_equal(a.labels(), y), "labels stored from an array")
    # SOURCE_DATE_EPOCH dates the archive, as it does the command's (reproducible bytes).
    os.environ["SOURCE_DATE_EPOCH"] = "1700000000"
    try:
        dctchop.compress(x, f"{d}/sde.dcz", chop=2)
        created = json.loads(dctchop.Archive(f"{d}/sde.dcz").info_json())["provenance"]["created"]
        check(created == "2023-11-14T22:13:20Z", f"SOURCE_DATE_EPOCH ignored: created {created}")
        os.environ["SOURCE_DATE_EPOCH"] = "yesterday"
        raises(dctchop.Error, lambda: dctchop.compress(x, f"{d}/sde2.dcz"), "SOURCE_DATE_EPOCH")
    finally:
        del os.environ["SOURCE_DATE_EPOCH"]
    # Big-endian and non-contiguous arrays are the same data.
    f = np.random.default_rng(2).normal(300, 2, size=(3, 30, 20)).astype(np.float32)
    # The offset words take any case, as the command's --offset.
    r1 = dctchop.compress(f, f"{d}/f1.dcz", offset="mean", coeff="bf16")
    r2 = dctchop.compress(f.astype(">f4"), f"{d}/f2.dcz", offset="mean", coeff="bf16")
    r3 = dctchop.compress(np.asfortranarray(f), f"{d}/f3.dcz", offset="MEAN", coeff="bf16")
    r4 = dctchop.compress(f, f"{d}/f4.dcz", offset=300)
    check(r1["offset"] == r2["offset"] == r3["offset"] and 299 < r1["offset"] < 301 and
          r4["offset"] == 300, f"offsets {r1['offset']} {r2['offset']} {r3['offset']} {r4['offset']}")
    native = dctchop.Archive(f"{d}/f1.dcz")[:]
    check(np.array_equal(native, dctchop.Archive(f"{d}/f2.dcz")[:]),
          "a big-endian array compresses as the native one")
    check(np.array_equal(native, dctchop.Archive(f"{d}/f3.dcz")[:]),
          "a Fortran-order array compresses as the C-order one")
    check(r1["input"] == "<array>" and r1["output"] == f"{d}/f1.dcz" and r1["backend"] == "cpu",
          "the report has the keys of compress --json")
    # float16 is a dtype of its own: float16 back, within f16's rounding at chop 8, whatever
    # the byte order.
    h = (np.random.default_rng(3).normal(0, 30, size=(3, 20, 12))).astype(np.float16)
    rh = dctchop.compress(h, f"{d}/h1.dcz", chop=8)
    dctchop.compress(h.astype(">f2"), f"{d}/h2.dcz", chop=8)
    ah = dctchop.Archive(f"{d}/h1.dcz")
    check(rh["dtype"] == "f16" and rh["coeff"] == "f32" and ah.dtype == np.float16,
          f"float16 input: {rh['dtype']} {rh['coeff']} {ah.dtype}")
    hb = ah[:]
    check(hb.dtype == np.float16 and hb.shape == h.shape, f"float16 decodes as {hb.dtype} {hb.shape}")
    check(np.allclose(hb.astype(np.float64), h.astype(np.float64), rtol=2.0 ** -10, atol=1e-3),
          "float16 at chop 8 decodes within f16's rounding")
    check(np.array_equal(hb, dctchop.Archive(f"{d}/h2.dcz")[:]),
          "a big-endian float16 array compresses as the native one")
    # int8 likewise: int8 back, exactly at chop 8 (f16 coefficients, as for uint8).
    i8 = np.random.default_rng(4).integers(-128, 128, size=(2, 16, 24), dtype=np.int8)
    ri = dctchop.compress(i8, f"{d}/i8.dcz", chop=8)
    ib = dctchop.Archive(f"{d}/i8.dcz")[:]
    check(ri["dtype"] == "i8" and ri["coeff"] == "f16" and ib.dtype == np.int8 and
          np.array_equal(ib, i8), f"int8 input: {ri['dtype']} {ri['coeff']} {ib.dtype}")
    # int32 and uint32 (detector counts): f32 coefficients, computed in double; at chop 8
    # within the f32 coefficients' precision, 8 * 8 * 2^31 * 2^-24 = 2^13, of the input.
    for t, lo, hi, name in ((np.int32, -2**31, 2**31, "i32"), (np.uint32, 0, 2**32, "u32")):
        w = np.random.default_rng(5).integers(lo, hi, size=(2, 16, 24), dtype=t)
        rw = dctchop.compress(w, f"{d}/w.dcz", chop=8, overwrite=True)
        with dctchop.Archive(f"{d}/w.dcz") as aw:
            wb = aw[:]
            off = aw.offset
        err = np.abs(wb.astype(np.float64) - w.astype(np.float64)).max()
        check(rw["dtype"] == name and rw["coeff"] == "f32" and off == w[0].mean() and
              wb.dtype == t and 0 < err <= 2**13, f"{name} input: {rw['dtype']} {rw['coeff']} "
              f"offset {off} {wb.dtype} error {err}")
    # A target instead of a chop.
    t = dctchop.compress(x, f"{d}/t.dcz", psnr=20)
    got = t["quality"]["psnr_db"]  # None: lossless
    check((got is None or got >= 20) and t["chop_search"], f"target: chop {t['chop']}, {got} dB")
    # A target out of reach: the error lists what was measured (and pickles with it).
    e = raises(dctchop.Error, lambda: dctchop.compress(x.astype(np.float32), f"{d}/u.dcz",
                                                       psnr=400), "short of the target")
    search = getattr(e, "chop_search", None) or []
    check(e is not None and e.kind == "quality_not_met" and
          [s["chop"] for s in search] == list(range(1, 9)) and
          not any(s["meets"] for s in search) and all(s["psnr_db"] < 400 for s in search),
          f"unreachable target: {e!r} {search}")
    again = pickle.loads(pickle.dumps(e))
    check(getattr(again, "chop_search", None) == search, "the measurements survive pickling")
    check(not os.path.exists(f"{d}/u.dcz"), "no output from a failed search")
    # Errors.
    e = raises(FileError_, lambda: dctchop.compress(x, f"{d}/py.dcz"), "overwrite=True")
    check(e is not None and e.kind == "output_exists", f"existing output: {e!r}")
    # One sample's shape, for every layout: an HW archive's shape has no sample axis.
    img = (np.arange(20 * 12) % 251).astype(np.uint8).reshape(20, 12)
    dctchop.compress(img, f"{d}/hw.dcz", layout="HW")
    with dctchop.Archive(f"{d}/hw.dcz") as hw:
        check(hw.shape == (20, 12) and hw.sample_shape == (20, 12) and len(hw) == 1,
              f"HW archive: shape {hw.shape}, sample_shape {hw.sample_shape}")
        check(hw[0].shape == hw.sample_shape and hw.read(0, 1).shape == (1, 20, 12),
              f"HW archive reads: {hw[0].shape}, {hw.read(0, 1).shape}")
    with dctchop.Archive(f"{d}/py.dcz") as nd:
        check(nd.sample_shape == tuple(nd.shape)[1:] and nd[0].shape == nd.sample_shape and
              nd.read(0, 2).shape == (2, *nd.sample_shape), f"sample_shape {nd.sample_shape}")
    # The built-in OSError kinds that open() raises, errno set, str() the one-line message.
    e = raises(FileExistsError, lambda: dctchop.compress(x, f"{d}/py.dcz"), "py.dcz: already exists")
    check(e is not None and e.errno == errno.EEXIST and isinstance(e, FileError_), f"{e!r}")
    e = raises(FileNotFoundError, lambda: dctchop.compress(x, f"{d}/no_such_folder/a.dcz"), "no_such_folder")
    check(e is not None and e.errno == errno.ENOENT and e.kind == "io", f"{e!r}")
    os.makedirs(f"{d}/folder.dcz", exist_ok=True)
    e = raises(IsADirectoryError, lambda: dctchop.compress(x, f"{d}/folder.dcz"), "folder.dcz: is a directory")
    check(e is not None and e.errno == errno.EISDIR and isinstance(e, dctchop.Error), f"{e!r}")
    e = raises(NotADirectoryError, lambda: dctchop.Archive(f"{d}/cx.npy/a.dcz"), "cx.npy/a.dcz")
    check(e is not None and e.errno == errno.ENOTDIR and isinstance(e, FileError_), f"{e!r}")
    e = raises(IsADirectoryError, lambda: dctchop.Archive(f"{d}/folder.dcz"), "is a directory")
    check(e is not None and str(e).startswith(f"{d}/folder.dcz"), f"{e!r}")
    # strerror and filename as open() sets them (None before), str() still the message; kept
    # through pickling.
    missing = f"{d}/missing.dcz"
    for fn, name, code in ((lambda: dctchop.Archive(missing), missing, errno.ENOENT),
                           (lambda: dctchop.Loader(missing), missing, errno.ENOENT),
                           (lambda: dctchop.compress(x, f"{d}/py.dcz"), f"{d}/py.dcz",
                            errno.EEXIST)):
        e = raises(OSError, fn)
        for b in (e, pickle.loads(pickle.dumps(e)) if e is not None else None):
            check(b is not None and
                  (b.errno, b.strerror, b.filename) == (code, os.strerror(code), name)
                  and str(b).startswith(name + ": "), f"{b!r}: {b.strerror!r} {b.filename!r}")
    # They pickle, errno and kind included: a DataLoader worker sends its errors that way (an
    # error that cannot be pickled leaves the parent waiting for the batch forever).
    for fn in (lambda: dctchop.compress(x, f"{d}/py.dcz"), lambda: dctchop.Archive(f"{d}/missing.dcz"),
               lambda: dctchop.compress(x, f"{d}/folder.dcz"), lambda: dctchop.compress(x, "-"),
               lambda: dctchop.compress(x.astype(np.int64), f"{d}/i.dcz")):
        e = raises(dctchop.Error, fn)
        back = pickle.loads(pickle.dumps(e)) if e is not None else None
        again = pickle.loads(pickle.dumps(back)) if back is not None else None  # and on again
        for b in (back, again):
            check(b is not None and type(b) is type(e) and str(b) == str(e) and
                  b.kind == e.kind and getattr(b, "errno", None) == getattr(e, "errno", None),
                  f"pickled {e!r}: {b!r}")
    check(dctchop.Error("from a message alone").kind is None, "kind is None where unknown")
    # Made by hand (a test's mock), FileError takes OSError's arguments as OSError does.
    made = dctchop.FileError(errno.ENOENT, "No such file", "x.dcz")
    check((made.errno, made.strerror, made.filename) == (errno.ENOENT, "No such file", "x.dcz") and
          str(made) == "[Errno 2] No such file: 'x.dcz'" and made.kind is None, f"{made!r}")
    back = pickle.loads(pickle.dumps(made))
    check((back.errno, back.strerror, back.filename) == (made.errno, made.strerror, made.filename),
          f"pickled {made!r}: {back!r}")
    check(dctchop.FileError("a message").errno is None and str(dctchop.FileError("a message")) ==
          "a message", "a message alone")
    e = raises(FileNotFoundError, lambda: dctchop.Archive(f"{d}/missing.dcz"))
    check(e is not None and isinstance(e, dctchop.FileError) and e.errno == errno.ENOENT and
          e.kind == "io", f"a missing archive is a dctchop.FileError too: {e!r}")
    check(dctchop.compress(x, f"{d}/py.dcz", overwrite=True)["chop"] == 4, "overwrite=True")
    # Bad input is a ValueError too, as a bad argument is (it was a RuntimeError alone).
    e = raises(ValueError, lambda: dctchop.compress(x.astype(np.int64), f"{d}/i.dcz"), "dtype int64 is not supported")
    check(e is not None and e.kind == "bad_input" and isinstance(e, dctchop.Error), f"an int64 array: {e!r}")
    raises(ValueError, lambda: dctchop.compress(x, f"{d}/l.dcz", labels=y[:5]), "one row per sample")
    # A list of Python ints or bools: NumPy chose int64 (bool), not the caller; the message
    # says how to choose. A list of floats is f64, which dctchop takes; list labels are kept.
    for listed, kind in (([[[1, 2], [3, 4]]] * 2, "int64"), ([[[True] * 8] * 8] * 2, "bool")):
        raises(ValueError, lambda: dctchop.compress(listed, f"{d}/list.dcz"),
               f"data is a list that NumPy reads as {kind}, which dctchop does not compress",
               "np.asarray(data, np.uint8)")
    check(not os.path.exists(f"{d}/list.dcz"), "a refused list leaves no file")
    # A typed buffer chose its type: said as an array's is (not as a list's).
    raises(ValueError, lambda: dctchop.compress(memoryview(np.zeros((2, 16, 16), "<i8")),
                                                f"{d}/list.dcz"), "dtype int64 is not supported")
    r = dctchop.compress([[[1.0, 2.0], [3.0, 4.0]]] * 2, f"{d}/list.dcz", labels=[3, 4])
    check(r["dtype"] == "f64" and dctchop.Archive(f"{d}/list.dcz").labels().tolist() == [3, 4],
          f"a list of floats is f64, labels of a list kept: {r}")
    # A block size that is none: one message for every one (block=0 said "at least 1").
    for b in (0, 5, 64, -8):
        raises(ValueError, lambda: dctchop.compress(x, f"{d}/b.dcz", block=b),
               f"block size {b} is not one of 4, 8, 16, 32")
        raises(ValueError, lambda: dctchop.decode_matrices(b, 1, 8, 8),
               f"block size {b} is not one of 4, 8, 16, 32")
    raises(ValueError, lambda: dctchop.compress(np.float32(3), f"{d}/z.dcz"), "0-d")
    raises(ValueError, lambda: dctchop.compress(np.full((2, 8, 8), np.nan, np.float32), f"{d}/n.dcz"), "NaN")
    # Flags and names of the right type only (overwrite="False" overwrote; layout=None was
    # pybind's "incompatible function arguments" with the private signature).
    raises(TypeError, lambda: dctchop.compress(x, f"{d}/py.dcz", overwrite="False"), "overwrite must be True or False")
    raises(TypeError, lambda: dctchop.compress(x, f"{d}/q.dcz", quality="no"), "quality must be True or False")
    raises(TypeError, lambda: dctchop.compress(x, f"{d}/q.dcz", layout=None), "layout must be a str, not NoneType")
    raises(TypeError, lambda: dctchop.compress(x, f"{d}/q.dcz", coeff=np.float16), "coeff must be a str or None")
    raises(ValueError, lambda: dctchop.compress(x, f"{d}/b.dcz", block=6), "block size 6")
    raises(ValueError, lambda: dctchop.compress(x, f"{d}/o.dcz", offset="middle"), "offset")
    raises(ValueError, lambda: dctchop.compress(x, "-"), "not -")
    # The library's messages name the keywords, not the command's options.
    nan = f.copy()
    nan[1, 2, 3] = np.nan
    e = raises(dctchop.Error, lambda: dctchop.compress(nan, f"{d}/n.dcz"), "sample 1", "nonfinite=V")
    check(e is not None and "--" not in str(e), f"no command option in {e}")
    check(dctchop.compress(nan, f"{d}/n.dcz", nonfinite=0)["nonfinite_replaced"] == 1,
          "nonfinite=0 replaces the NaN")
    # The notes the command prints come in the report, in the keywords' terms.
    notes = dctchop.compress(x, f"{d}/nn.dcz", nonfinite=0, chop=8)["notes"]
    check(notes[:1] == ["nonfinite= has no effect: u8 data holds no NaN or Inf"] and
          any("the archive is larger than the input" in n for n in notes), f"notes {notes}")
    small = dctchop.compress(f / 1000, f"{d}/i16.dcz", coeff="i16")["notes"]
    check(any(n.startswith("i16 rounds every coefficient") for n in small), f"i16 notes {small}")
    check(dctchop.compress(x, f"{d}/plain.dcz", quality=False)["notes"] == [], "no notes where none is due")
    raises(ValueError, lambda: dctchop.compress(x, f"{d}/c.dcz", chunk_mb=0), "chunk_mb")
    raises(ValueError, lambda: dctchop.compress(x, f"{d}/c.dcz", threads=10**6), "at most 4096")
    raises(ValueError, lambda: dctchop.compress(np.ma.masked_array(x), f"{d}/c.dcz"), "masked")
    raises(dctchop.Error, lambda: dctchop.compress(x.astype(np.complex64), f"{d}/c.dcz"), "complex")
    # A record array of labels was called "void (raw bytes)", as its dtype.str ('|V4') says.
    records = np.zeros(len(x), dtype=[("cls", "i4")])
    raises(dctchop.Error, lambda: dctchop.compress(x, f"{d}/c.dcz", labels=records),
           "<labels>: structured dtypes (records with named fields) are not supported")
    raises(TypeError, lambda: dctchop.compress(None, f"{d}/c.dcz"), "None")
    raises(TypeError, lambda: dctchop.compress(f"{d}/cx.npy", f"{d}/c.dcz"), "np.load it")
    # bytes of data (a NUL, or past a path's length) are no path, and not printed whole (a 4
    # MiB buffer made a message of 16.7 MB).
    e = raises(TypeError, lambda: dctchop.compress(x.tobytes(), f"{d}/c.dcz"), "not a bytes object")
    check(e is not None and len(str(e)) < 200, f"a message of {len(str(e)) if e else 0} characters")
    buffer = io.BytesIO()
    np.save(buffer, x)  # a .npy file's bytes: np.load them
    raises(TypeError, lambda: dctchop.compress(buffer.getvalue(), f"{d}/c.dcz"),
           "load it: np.load(io.BytesIO(b))")
    raises(TypeError, lambda: dctchop.compress(b"", f"{d}/c.dcz"), "not a bytes object (0 bytes)")
    e = raises(TypeError, lambda: dctchop.compress(b"p" * 3000, f"{d}/c.dcz"), "not the path b'ppp")
    check(e is not None and len(str(e)) < 400, f"a message of {len(str(e)) if e else 0} characters")
    raises(TypeError, lambda: dctchop.compress(x, f"{d}/c.dcz", labels=pathlib.Path(f"{d}/y.npy")),
           "the labels as an array")
    # A 2-D array is one image: said, with the fix for rows of flattened images.
    flat = dctchop.compress(np.zeros((50, 784), np.uint8), f"{d}/flat.dcz", quality=False)
    check(any("a 2-D array is one image (layout HW) of 50x784; if its rows are flattened 28x28 "
              "images, reshape it to (50, 28, 28) first" in n for n in flat["notes"]),
          f"2-D notes {flat['notes']}")
    check(dctchop.compress(x, f"{d}/t2.dcz", psnr=20)["chop"] >= 1, "psnr= chooses the chop")
    check(dctchop.compress(x, f"{d}/t2.dcz", overwrite=True)["chop"] == 4, "chop 4 by default")
    # A chop beside a target was ignored, out of range too; the command refuses --chop with --psnr.
    raises(dctchop.ArgumentError, lambda: dctchop.compress(x, f"{d}/t3.dcz", chop=9, psnr=30),
           "chop=9 with psnr=: give one")
    raises(dctchop.ArgumentError, lambda: dctchop.compress(x, f"{d}/t3.dcz", chop=4, ssim=0.9),
           "chop=4 with ssim=: give one")
    # Targets that could not be measured are refused, as the command refuses them.
    raises(dctchop.ArgumentError, lambda: dctchop.compress(x, f"{d}/t3.dcz", psnr=30, quality=False),
           "quality=True")
    raises(dctchop.ArgumentError,
           lambda: dctchop.compress(x, f"{d}/t3.dcz", ssim=0.9, measure_ssim=False), "measure_ssim=True")
    # The library's messages name keywords, not the command's options.
    raises(dctchop.ArgumentError, lambda: dctchop.compress(np.zeros((2, 3, 8, 3), np.uint8), f"{d}/t3.dcz"),
           "pass layout='NHWC' or layout='NCHW'")
    # ... with a name as the string Python takes (coeff=f32 would name a variable).
    big = np.full((1, 16, 16), 20000.0, np.float16)
    big[0, :, 8:] = -20000.0
    raises(dctchop.ArgumentError,
           lambda: dctchop.compress(big, f"{d}/t4.dcz", coeff="f16", offset=0), "use coeff='f32'")
    # ... and the flags of --no-quality; a file name that holds an option's text stays whole.
    raises(ValueError, lambda: dctchop.compress(np.random.default_rng(0).random((3, 16, 16)) * 1e-160,
                                                f"{d}/t5.dcz"), "compress it unmeasured (quality=False)")
    os.makedirs(f"{d}/run-o 1", exist_ok=True)
    for name in ("train--chop4.dcz", "run-o 1/a--ssim.npy"):
        dctchop.compress(x, f"{d}/{name}")
        raises(FileError_, lambda: dctchop.compress(x, f"{d}/{name}"),
               f"{d}/{name}: already exists (pass overwrite=True)")
    notes = dctchop.compress(x, f"{d}/run-o 1/a--ssim.npy", overwrite=True)["notes"]
    check(any(n.startswith(f"{d}/run-o 1/a--ssim.npy holds a dctchop archive") for n in notes),
          f"a note naming a file that holds option text: {notes}")
    raises(FileNotFoundError, lambda: dctchop.compress(x, f"{d}/exp-o 2/x.dcz"),
           f"the folder {d}/exp-o 2 does not exist")
    # A short relative folder ("a") is a name where it stands alone, not the a of "replace".
    here = os.getcwd()
    os.chdir(d)
    try:
        for folder in ("a", "V"):  # ("V" is also the placeholder of the phrase)
            os.makedirs(folder, exist_ok=True)
            raises(ValueError, lambda: dctchop.compress(np.full((2, 8, 8), np.nan, np.float32),
                                                        f"{folder}/x.dcz"),
                   "(nonfinite=V substitutes V)")
        # The value given is named (the message said "V does not fit"), exactly (not 65504).
        for v, text in ((1e6, "1e+06"), (65504.01, "65504.01")):
            raises(ValueError, lambda: dctchop.compress(np.full((2, 8, 8), np.nan, np.float16),
                                                        "a/h.dcz", nonfinite=v),
                   f"nonfinite={text} does not fit f16")
        # ... and a folder named as an option's value does not cut the phrase it is in.
        os.makedirs("f32", exist_ok=True)
        big = np.full((1, 16, 16), 20000.0, np.float16)
        big[0, :, 8:] = -20000.0
        raises(dctchop.ArgumentError,
               lambda: dctchop.compress(big, "f32/x.dcz", coeff="f16", offset=0), "use coeff='f32'")
    finally:
        os.chdir(here)
    # Seeds are 64-bit (a state can carry any); prefetch holds batches in memory: bounded.
    l = dctchop.Loader(f"{d}/a.dcz", batch_size=5, seed=2**64 - 1)
    next(l)
    check(l.state()["seed"] == 2**64 - 1, f"seed 2**64 - 1: {l.state()}")
    raises(dctchop.ArgumentError, lambda: dctchop.Loader(f"{d}/a.dcz", seed=2**64), "seed")
    raises(dctchop.ArgumentError, lambda: dctchop.Loader(f"{d}/a.dcz", prefetch=10**6), "at most 1024")
    check(not any(n in os.listdir(d) for n in ("i.dcz", "l.dcz", "z.dcz", "b.dcz", "o.dcz", "c.dcz")),
          f"failures leave no output: {sorted(os.listdir(d))}")


def stopped_mid_way(d, x, kind, stopper):
    """Compresses ever more copies of x's samples, with progress=stopper(done), until `kind`
    is raised before the last sample was written; then True if no output is left. progress
    sets done[samples written] = total. Its calls come at most every 50 ms: a machine may
    finish a small input before one."""
    for n in (8_000, 32_000):
        big = np.resize(x, (n,) + x.shape[1:])
        done = {}
        progress, after = stopper(done)
        try:
            try:
                dctchop.compress(big, f"{d}/mid.dcz", chunk_mb=0.002, overwrite=True,
                                 progress=progress)
            finally:
                after()
        except kind:
            if max(done, default=0) < n:
                return not [f for f in os.listdir(d) if "mid.dcz" in f]
        if os.path.exists(f"{d}/mid.dcz"):
            os.remove(f"{d}/mid.dcz")
    check(False, f"compress always ended before {kind.__name__} stopped it")
    return False


def check_compress_progress_and_interrupt(d):
    """progress= sees the samples written; an exception from it, or Ctrl-C (SIGINT) while
    compress runs, stops compress at its next chunk with that exception, leaving no output."""
    x = np.random.default_rng(5).integers(0, 256, size=(600, 32, 32), dtype=np.uint8)
    seen = []
    dctchop.compress(x, f"{d}/p.dcz", chunk_mb=0.01, progress=lambda done, total: seen.append((done, total)))
    check(seen and seen[-1] == (600, 600) and all(t == 600 for _, t in seen) and
          [s for s, _ in seen] == sorted({s for s, _ in seen}), f"progress calls {seen}")
    raises(ValueError, lambda: dctchop.compress(x, f"{d}/p.dcz", progress=3), "progress")

    class Stop(Exception):
        pass

    def raising(done):
        def progress(written, total):
            done[written] = total
            raise Stop(written)
        return progress, lambda: None

    check(stopped_mid_way(d, x, Stop, raising), "an exception from progress leaves no output")
    # All or nothing: compress waits for a last check after its last chunk, so an exception
    # then (here the first and only progress call of a one-chunk compress) leaves no archive.
    for n in (1, 10, 100):
        raises(Stop, lambda: dctchop.compress(x[:n], f"{d}/last.dcz", progress=raising({})[0]))
        check(not [f for f in os.listdir(d) if "last.dcz" in f], f"{n} samples: no archive left")

    def signalling(done):
        # Another thread sends SIGINT once a chunk is written, while compress runs without
        # the GIL. progress is a builtin that runs no Python code, which would raise the
        # KeyboardInterrupt itself: compress's own check of signals must.
        ended = threading.Event()

        def send():
            while not done and not ended.is_set():
                ended.wait(0.001)
            if done:
                os.kill(os.getpid(), signal.SIGINT)

        sender = threading.Thread(target=send)
        sender.start()

        def after():
            ended.set()
            sender.join()
        return done.__setitem__, after

    check(stopped_mid_way(d, x, KeyboardInterrupt, signalling), "Ctrl-C leaves no output")

FileError_ = dctchop.FileError


FIFO_WITHOUT_READER = """
import signal, sys, numpy as np, dctchop
for reader in (dctchop.Archive, dctchop.Loader):  # refused at once (they waited for a writer)
    try:
        reader(sys.argv[1])
    except ValueError as e:
        print("refused" if "not a regular file" in str(e) else e)
def stop(*_):
    raise KeyboardInterrupt
signal.signal(signal.SIGALRM, stop)
signal.setitimer(signal.ITIMER_REAL, 0.3)
try:
    dctchop.compress(np.zeros((4, 8, 8), np.uint8), sys.argv[1], overwrite=True)
    print("returned")
except KeyboardInterrupt:
    print("interrupted")
"""


def check_signal_during_next_keeps_the_batch(d):
    """A signal (Ctrl-C) that comes while next() waits for its batch, without the GIL: raised
    as the call returned, it dropped the batch, which the loader had counted, and a state()
    saved in the handler resumed after it. Now the batch is kept for the next call, and
    state() says it was not handed out. A thread sends the signal when it gets the GIL,
    which next() lets go (and which a long switch interval keeps from it until then), and
    only while next() runs: a try where it came too late is tried again."""
    from dctchop.torch import DeviceLoader

    x = np.random.default_rng(9).integers(0, 256, size=(24, 512, 512), dtype=np.uint8)
    dctchop.compress(x, f"{d}/sig.dcz", chop=8, quality=False)
    back = dctchop.Archive(f"{d}/sig.dcz").read(0, 24)

    class Stop(Exception):
        pass

    def stop(*_):
        raise Stop()

    old = signal.signal(signal.SIGUSR1, stop)
    interval = sys.getswitchinterval()
    try:
        for name, make in (("Loader", lambda: dctchop.Loader(f"{d}/sig.dcz", batch_size=8,
                                                             shuffle=False, prefetch=0)),
                           ("DeviceLoader", lambda: DeviceLoader(f"{d}/sig.dcz", batch_size=8,
                                                                 shuffle=False, prefetch=0))):
            for attempt in range(5):
                loader = make()
                next(loader)  # samples 0..7
                gate = threading.Lock()
                gate.acquire()
                inside = [False]
                sent = [False]

                def send():
                    with gate:
                        if inside[0]:  # (next() has the GIL released: it is running)
                            sent[0] = True
                            os.kill(os.getpid(), signal.SIGUSR1)

                t = threading.Thread(target=send)
                t.start()
                raised = False
                sys.setswitchinterval(100.0)
                try:
                    gate.release()
                    inside[0] = True
                    next(loader)
                    inside[0] = False
                except Stop:
                    inside[0] = False
                    raised = True
                finally:
                    sys.setswitchinterval(interval)
                t.join()
                if not sent[0]:
                    loader.close()
                    continue  # the thread ran after next(): try again
                check(raised, f"{name}: the signal was raised in next()")
                state = loader.state()
                check(state["position"] == 1, f"{name}: state() after the signal counts the "
                                              f"kept batch as not handed out: {state}")
                xb, _ = next(loader)
                check(list(loader.last_samples) == list(range(8, 16)),
                      f"{name}: the kept batch comes next: {list(loader.last_samples)}")
                check(np.array_equal(np.asarray(xb), back[8:16]), f"{name}: its data")
                check(loader.state()["position"] == 2, f"{name}: then the state moves on")
                loader.close()
                break
            else:
                check(False, f"{name}: the signal never came while next() ran (5 tries)")
    finally:
        signal.signal(signal.SIGUSR1, old)
    # A signal raised after next()'s native call returned, in Loader.__next__'s own lines
    # (a tester's Ctrl-C storm lost 0 to 5 batches a run so): the batch stays the loader's
    # until __next__ has it, handed out again by the next call. Here the native call's
    # result is dropped as such a signal drops it.
    loader = dctchop.Loader(f"{d}/sig.dcz", batch_size=8, shuffle=False, prefetch=0)
    next(loader)  # samples 0..7
    lost = loader._l.next(loader._got)  # samples 8..15, never reaching __next__'s caller
    check(list(lost[2]) == list(range(8, 16)), f"the dropped call's batch: {list(lost[2])}")
    del lost
    check(loader.state()["position"] == 1, f"state() before the batch never held: "
                                           f"{loader.state()}")
    xb, _ = next(loader)
    check(list(loader.last_samples) == list(range(8, 16)),
          f"the batch never held comes next: {list(loader.last_samples)}")
    check(np.array_equal(np.asarray(xb), back[8:16]), "its data")
    check(loader.state()["position"] == 2, f"then the state moves on: {loader.state()}")
    next(loader)
    check(list(loader.last_samples) == list(range(16, 24)), "and the batch after it")
    # In a loop too (its generator held the batch only after next() returned, where a
    # Ctrl-C lost it): a batch taken and never held comes first in the next loop.
    loader._take()  # samples 0..7 (the second epoch's first batch), dropped
    check(loader.state()["position"] == 0, f"a dropped take: {loader.state()}")
    got = [list(loader.last_samples) for _ in loader]
    check(got == [list(range(0, 8)), list(range(8, 16)), list(range(16, 24))],
          f"the loop after a dropped take: {got}")
    # A pickled copy of a loader whose last batch was never held resumes at that batch.
    loader._l.next(loader._got)  # (the epoch's first batch again: 3 batches an epoch)
    copy_of = pickle.loads(pickle.dumps(loader))
    next(copy_of)
    check(list(copy_of.last_samples) == list(range(0, 8)),
          f"the copy resumes at the batch never held: {list(copy_of.last_samples)}")
    copy_of.close()
    loader.close()


def check_fifo_output_without_reader(d):
    """compress into a FIFO waits for its reader, as the command does, and Ctrl-C ends the
    wait: the work's thread sat in open() and the call joined it for good. Archive and
    Loader, which need random access, refuse a FIFO before opening it (they waited for a
    writer)."""
    fifo = f"{d}/fifo"
    os.mkfifo(fifo)
    try:
        r = subprocess.run([sys.executable, "-c", FIFO_WITHOUT_READER, fifo], capture_output=True,
                           text=True, timeout=30)
        check(r.stdout.split() == ["refused", "refused", "interrupted"],
              f"a FIFO to read, and Ctrl-C while one waits: {r.stdout!r} {r.stderr[-300:]!r}")
    except subprocess.TimeoutExpired:
        check(False, "Ctrl-C while an output FIFO waited for its reader: the call never returned")
    finally:
        os.remove(fifo)


def check_reads_from_threads(d, back, y):
    """Archive reads run without the GIL: several threads reading one archive get the right
    samples, and a close() from another thread meanwhile makes reads raise ValueError, never
    crash or read a freed reader."""
    a = dctchop.Archive(f"{d}/a.dcz")
    wrong, errors = [], []

    def reader(seed):
        rng = np.random.default_rng(seed)
        for _ in range(200):
            i = int(rng.integers(0, 37))
            try:
                if not np.array_equal(a.read(i, 1)[0], back[i]):
                    wrong.append(i)
                if not np.array_equal(a.labels(), y):
                    wrong.append("labels")
                if len(a.read_coefficients(i, 1)) != 1:
                    wrong.append("coefficients")
            except ValueError as e:  # closed meanwhile
                check("closed" in str(e), f"a read after close: {e}")
                return
            except Exception as e:  # noqa: BLE001 - reported
                errors.append(repr(e))
                return

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not wrong and not errors, f"reads from 4 threads: wrong {wrong[:5]}, errors {errors[:3]}")
    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    a.close()
    for t in threads:
        t.join()
    check(not wrong and not errors, f"reads beside close(): wrong {wrong[:5]}, errors {errors[:3]}")
    raises(ValueError, lambda: a.read(0, 1), "closed")


def check_fork_beside_a_reading_thread(d, back):
    """A fork() while another thread is inside a call on an Archive or a Loader (its lock held,
    the GIL released): the child's first call waited for that lock for good, held by a thread
    the child does not have (a DataLoader forks its workers each epoch; the parent may be
    reading). Each child now reads the right sample and batch."""
    a = dctchop.Archive(f"{d}/a.dcz")
    loader = dctchop.Loader(f"{d}/a.dcz", batch_size=4, seed=1, shuffle=False)
    stop = threading.Event()

    def reading():
        while not stop.is_set():
            a.read(0, 37)
            next(loader)

    t = threading.Thread(target=reading)
    t.start()
    hung, failed = 0, 0
    for _ in range(40):
        pid = os.fork()
        if pid == 0:  # the child: only this thread
            try:
                ok = np.array_equal(a[3], back[3]) and next(loader)[0].shape == (4, 20, 18, 3)
                os._exit(0 if ok else 1)
            except BaseException:  # noqa: BLE001 - reported by the exit status
                os._exit(2)
        deadline = time.monotonic() + 10
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                failed += os.waitstatus_to_exitcode(status) != 0
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                hung += 1
                break
            time.sleep(0.005)
        if hung:
            break  # one is enough
    stop.set()
    t.join()
    check(hung == 0 and failed == 0, f"forks beside a reading thread: a child hung ({hung}), "
          f"{failed} failed")


DAEMON_AT_EXIT = """
import sys, threading, numpy as np, dctchop
case, d = sys.argv[1], sys.argv[2]
x = np.random.default_rng(0).integers(0, 256, size=(4000, 32, 32, 3), dtype=np.uint8)
inside = threading.Event()
def busy(done, total):  # Python code that holds the GIL until the interpreter ends it
    inside.set()
    while True:
        pass
def work():
    if case == "compress":  # waiting for its work, without the GIL, when Python exits
        dctchop.compress(x, f"{d}/daemon-{case}.dcz", chunk_mb=0.05, progress=lambda n, t: inside.set())
    elif case == "progress":
        dctchop.compress(x, f"{d}/daemon-{case}.dcz", chunk_mb=0.05, progress=busy)
    else:  # a loader's next batch: decoded in next() itself, so the thread is mostly there
        loader = dctchop.Loader(f"{d}/a.dcz", batch_size=5, prefetch=0)
        while True:
            for _ in loader.epoch():
                inside.set()
threading.Thread(target=work, daemon=True).start()
inside.wait(60)
"""


def check_daemon_threads_at_exit(d):
    """A script that ends while a daemon thread is inside compress or the loader exits as it
    would without dctchop (0), instead of aborting: Python before 3.14 ends a thread that takes
    the GIL back during its shutdown with pthread_exit, which used to unwind out of the
    binding's GIL release and call std::terminate (exit 134 or a crash). Each case puts the
    thread where it was seen to abort: waiting for compress's work without the GIL, running
    Python code called by compress, waiting for a loader's batch."""
    for case in ("compress", "progress", "loader"):
        r = subprocess.run([sys.executable, "-c", DAEMON_AT_EXIT, case, d], capture_output=True,
                           text=True, timeout=120)
        check(r.returncode == 0, f"daemon thread in {case} at exit: status {r.returncode}, "
              f"stderr {r.stderr[-500:]!r}")
        out = f"{d}/daemon-{case}.dcz"
        if os.path.exists(out):  # compress may have finished first: then a whole archive
            check(dctchop.Archive(out).samples == 4000, f"{case}: a partial archive was left")
        check(case == "compress" or not os.path.exists(out), f"{case}: an unfinished compress left an output")
    # The thread that shuts Python down may still call dctchop (a generator closed at exit, a
    # __del__): it must not wait as the daemon threads do.
    at_exit = (f"import dctchop\n"
               f"def gen():\n"
               f"    with dctchop.Loader({d + '/a.dcz'!r}, batch_size=4) as l:\n"
               f"        yield from l\n"
               f"g = gen(); next(g)\n"
               f"a = dctchop.Archive({d + '/a.dcz'!r})\n"
               f"class D:\n"
               f"    def __del__(self):\n"
               f"        a.read(0, 2); a.close()\n"
               f"d = D()\n")
    try:
        r = subprocess.run([sys.executable, "-c", at_exit], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"dctchop called during shutdown: status {r.returncode}, {r.stderr[-300:]!r}")
    except subprocess.TimeoutExpired:
        check(False, "dctchop called during shutdown: the interpreter never exited")


def main():
    binary, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as d:
        rng = np.random.default_rng(4)
        x = rng.integers(0, 256, size=(37, 20, 18, 3), dtype=np.uint8)
        y = np.arange(37, dtype=np.int64) * 7
        np.save(f"{d}/x.npy", x)
        np.save(f"{d}/y.npy", y)
        subprocess.run([binary, "compress", f"{d}/x.npy", "--labels", f"{d}/y.npy", "-o",
                        f"{d}/a.dcz", "-q", "--no-quality", "--chunk-mb", "0.002"], check=True)
        subprocess.run([binary, "decompress", f"{d}/a.dcz", "-o", f"{d}/back.npy", "-q"],
                       check=True)
        back = np.load(f"{d}/back.npy")

        a = dctchop.Archive(f"{d}/a.dcz")
        check(a.samples == 37, "samples")
        check(list(a.shape) == [37, 20, 18, 3], f"shape {a.shape}")
        check(a.dtype == np.uint8, f"dtype {a.dtype}")
        check((a.block, a.chop, a.coeff, a.layout) == (8, 4, "f16", "NHWC"),
              f"codec {(a.block, a.chop, a.coeff, a.layout)}")
        part = a.read(5, 9)
        check(part.shape == (9, 20, 18, 3) and np.array_equal(part, back[5:14]),
              "read(5, 9) equals the CLI's decompress")
        check(np.array_equal(a.read(0, 37), back), "read of everything")
        check(np.array_equal(a.labels(), y), "labels")
        try:
            a.read(30, 10)
            check(False, "reading past the end raises")
        except IndexError as e:
            # ... and is a dctchop.Error, as every error of the module is (it was not).
            check(isinstance(e, dctchop.Error) and e.kind == "out_of_range",
                  f"an out-of-range read is a dctchop.Error of kind out_of_range: {type(e)}")
            check(pickle.loads(pickle.dumps(e)).kind == "out_of_range", "and pickles so")
        for bad in (lambda: a[37], lambda: a.read(2**70)):
            try:
                bad()
                check(False, "out of range")
            except dctchop.SampleIndexError as e:
                check(isinstance(e, IndexError) and e.kind == "out_of_range", f"{e!r}")
        try:
            dctchop.Archive(f"{d}/x.npy")
            check(False, "a non-archive raises")
        except dctchop.Error as e:
            check(e.kind in ("corrupt", "bad_input"), f"error kind {e.kind}")
            check(str(e).endswith("is a .npy file, not a dctchop archive (compress makes one of it)")
                  and "x.npy" in str(e),
                  f"the message is the text, not a tuple: {e}")
        check_python_habits(d, back, y)
        check_reads_from_threads(d, back, y)
        check_fork_beside_a_reading_thread(d, back)
        check_fifo_output_without_reader(d)
        check_signal_during_next_keeps_the_batch(d)
        check_compress_from_python(binary, d, x, y)
        check_compress_progress_and_interrupt(d)
        check_daemon_threads_at_exit(d)

        # The loader: one epoch has every sample once, with its own data and label.
        loader = dctchop.Loader(f"{d}/a.dcz", batch_size=5, seed=3, drop_last=False)
        check(loader.batches_per_epoch == 8, f"batches {loader.batches_per_epoch}")
        seen = []
        for xb, yb in loader.epoch():
            idx = loader.last_samples
            check(np.array_equal(xb, back[idx]), "batch data is its samples' data")
            check(np.array_equal(yb, y[idx]), "batch labels are its samples' labels")
            seen.extend(idx.tolist())
        check(sorted(seen) == list(range(37)), "every sample once in an epoch")
        # As a torch DataLoader: len() is the batches of an epoch, and a for loop one epoch.
        check(len(loader) == 8, f"len(loader) {len(loader)}")
        e1 = [loader.last_samples.copy() for _ in loader]
        check(len(e1) == 8 and loader.last_epoch == 1, f"for ... in loader: {len(e1)} batches, "
              f"epoch {loader.last_epoch}")
        check(sorted(np.concatenate(e1).tolist()) == list(range(37)), "that epoch holds every sample")
        # A loop that would start inside an epoch (a batch taken to look at it, or a loop left
        # with break) starts the next one: len(loader) batches, every sample, as with torch.
        next(iter(loader))
        peeked = loader.last_epoch
        e2 = [loader.last_samples.copy() for _ in loader]
        check(len(e2) == 8 and loader.last_epoch == peeked + 1, f"after a peek: {len(e2)} batches, "
              f"epoch {loader.last_epoch} after {peeked}")
        check(sorted(np.concatenate(e2).tolist()) == list(range(37)), "and every sample")
        for i, _ in enumerate(loader):
            if i == 2:
                break
        after_break = loader.last_epoch
        e3 = [loader.last_samples.copy() for _ in loader]
        check(len(e3) == 8 and loader.last_epoch == after_break + 1, f"after a break: {len(e3)}")
        # ... but right after restore() a loop finishes the restored epoch.
        for i, _ in enumerate(loader):
            if i == 2:
                break
        mid = loader.state()
        rest = [loader.last_samples.copy() for _ in loader.epoch()]
        loader.restore(mid)
        again = [loader.last_samples.copy() for _ in loader]
        check(len(again) == 5 and all(np.array_equal(a, b) for a, b in zip(again, rest)),
              f"a loop after restore(): {len(again)} batches, the rest of that epoch")
        # A batch taken after restore() and then a loop: the loop starts a new epoch.
        loader.restore(mid)
        next(loader)
        fresh = [loader.last_samples.copy() for _ in loader]
        check(len(fresh) == 8, f"restore(), next(), then a loop: {len(fresh)} batches")
        # close() stops it; the batches handed out stay valid; a context manager too.
        with dctchop.Loader(f"{d}/a.dcz", batch_size=5, seed=3, drop_last=False) as c:
            kept, _ = next(c)
            kept_idx = c.last_samples.copy()
        check(c.closed, "closed after the with block")
        check(np.array_equal(kept, back[kept_idx]), "a batch outlives its closed loader")
        raises(dctchop.ArgumentError, lambda: next(c), "closed")
        raises(ValueError, lambda: c.state(), "closed")
        check(seen != sorted(seen), "shuffled")
        # Resume: the state after 3 batches of an epoch gives the same next batches.
        start = loader.state()
        next(loader), next(loader), next(loader)
        state = loader.state()
        check(start["position"] == 0 and state["epoch"] == start["epoch"] and
              state["position"] == 3, f"state {state} from {start}")
        want = [loader.last_samples.copy() for _ in [next(loader)]]
        other = dctchop.Loader(f"{d}/a.dcz", batch_size=5, seed=99, drop_last=False)
        other.restore(state)
        next(other)
        check(np.array_equal(other.last_samples, want[0]), "restore resumes at the same batch")
        # A pickled loader goes on where the original stands, from another folder too, with its
        # options (the seed included), and the original is untouched by the copy.
        other.restore(state)
        next(other)
        copies = [pickle.loads(pickle.dumps(other))]
        cwd = os.getcwd()
        try:
            os.chdir("/")
            copies.append(copy.deepcopy(other))
        finally:
            os.chdir(cwd)
        def take(batches, n):
            out = []
            for _ in range(n):
                next(batches)
                out.append(batches.last_samples.copy())
            return out
        ahead = take(other, 9)
        for twin in copies:
            check(np.array_equal(twin.last_samples, want[0]) and twin.last_epoch == state["epoch"],
                  "a copy keeps the last batch's samples and epoch")
            got = take(twin, 9)
            check(all(np.array_equal(a, b) for a, b in zip(got, ahead)) and len(got) == 9,
                  "a copied loader gives the original's next batches, across the epoch's end")
            check(twin.state() == other.state(), f"and stands where it does: {twin.state()}")
        # A copy made right after restore() finishes the restored epoch in a loop, as the
        # original would; a closed loader comes back closed.
        other.restore(state)
        twin = pickle.loads(pickle.dumps(other))
        check(len([1 for _ in twin]) == loader.batches_per_epoch - state["position"],
              "a loop over a copy made after restore() finishes the restored epoch")
        other.close()
        closed_twin = pickle.loads(pickle.dumps(other))
        check(closed_twin.closed, "a closed loader comes back closed")
        # ... and answers len() as the closed original does
        check(len(other) == len(closed_twin) == other.batches_per_epoch,
              f"len() of a closed loader {len(other)} and of its copy")
        # A closed copy from a pickle made before the batch count was kept pickles again.
        older = dctchop._reloaded(dctchop.Loader, f"{d}/a.dcz", {"batch_size": 2}, None, False,
                                  (None, None), True)
        check(pickle.loads(pickle.dumps(older)).closed, "an older closed copy pickles again")
        # ... without opening its file, which may be gone since, or hold too few samples now.
        shutil.copy(f"{d}/a.dcz", f"{d}/gone.dcz")
        gone = dctchop.Loader(f"{d}/gone.dcz", batch_size=4, seed=3)
        next(gone)
        gone.close()
        os.remove(f"{d}/gone.dcz")
        for twin in (pickle.loads(pickle.dumps(gone)), copy.deepcopy(gone)):
            check(twin.closed and np.array_equal(twin.last_samples, gone.last_samples),
                  "a closed loader's copy without its file")
            raises(dctchop.ArgumentError, lambda: next(twin), "closed")
            raises(ValueError, lambda: twin.state(), "closed")
            twin.close()  # (closing it again is nothing)
        # Two shards partition the samples: without drop_last each takes ceil(37 / 2) = 19,
        # the second's slice wrapping around to the first sample of the order, so that both
        # give the same number of batches (as DistributedSampler pads).
        shards = [dctchop.Loader(f"{d}/a.dcz", batch_size=4, seed=3, rank=r, world=2,
                                 drop_last=False) for r in (0, 1)]
        orders = [s.epoch_order(0) for s in shards]
        both = np.concatenate(orders)
        check(len(orders[0]) == len(orders[1]) == 19 and orders[1][-1] == orders[0][0]
              and sorted(both[:-1].tolist()) == list(range(37)),
              f"shards partition the dataset, the last padded with the first sample: {orders}")
        check([len(s) for s in shards] == [5, 5], "and have as many batches each")

        # Stored coefficients: read_coefficients gives what a Loader with decode=False hands out.
        raw, _ = next(dctchop.Loader(f"{d}/a.dcz", batch_size=37, shuffle=False,
                                     drop_last=False, decode=False))
        c = a.read_coefficients(3, 6)
        check(c.dtype == np.uint8 and c.shape == (6, raw.shape[1]) and np.array_equal(c, raw[3:9]),
              f"read_coefficients(3, 6): {c.dtype} {c.shape}")
        try:
            a.read_coefficients(36, 2)
            check(False, "reading coefficients past the end raises")
        except IndexError:
            pass

        # Labels of several values per sample: their own dtype and shape, writable; none: None.
        y2 = rng.normal(size=(37, 2)).astype(np.float32)
        np.save(f"{d}/y2.npy", y2)
        subprocess.run([binary, "compress", f"{d}/x.npy", "--labels", f"{d}/y2.npy", "-o",
                        f"{d}/b.dcz", "-q", "--no-quality"], check=True)
        l2 = dctchop.Loader(f"{d}/b.dcz", batch_size=4, seed=1)
        _, yb = next(l2)
        check(yb.dtype == np.float32 and yb.shape == (4, 2) and
              np.array_equal(yb, y2[l2.last_samples]), f"2-D labels: {yb.dtype} {yb.shape}")
        check(yb.flags.writeable, "label batches are writable arrays")
        subprocess.run([binary, "compress", f"{d}/x.npy", "-o", f"{d}/c.dcz", "-q",
                        "--no-quality"], check=True)
        _, none = next(dctchop.Loader(f"{d}/c.dcz", batch_size=4))
        check(none is None, "no labels: None")
        # Labels of zero values per sample are labels all the same: an empty (4, 0) array.
        np.save(f"{d}/y0.npy", np.zeros((37, 0), dtype=np.int32))
        subprocess.run([binary, "compress", f"{d}/x.npy", "--labels", f"{d}/y0.npy", "-o",
                        f"{d}/z.dcz", "-q", "--no-quality"], check=True)
        _, empty = next(dctchop.Loader(f"{d}/z.dcz", batch_size=4))
        check(empty is not None and empty.shape == (4, 0) and empty.dtype == np.int32,
              f"zero-width labels: {None if empty is None else (empty.shape, empty.dtype)}")

    return finish("python binding")


if __name__ == "__main__":
    sys.exit(main())
