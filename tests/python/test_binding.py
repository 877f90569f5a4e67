"""The Python binding (`import dctchop`), run by ctest: archives read as NumPy arrays equal
what `dctchop decompress` writes, and the loader iterates epochs, shards and resumes.

Usage: test_binding.py DCTCHOP_BINARY SCRATCH_DIR   (PYTHONPATH holds the built package)"""
import os
import subprocess
import sys
import tempfile

import numpy as np

import dctchop
from checks import check, finish


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
        except IndexError:
            pass
        try:
            dctchop.Archive(f"{d}/x.npy")
            check(False, "a non-archive raises")
        except dctchop.Error as e:
            check(e.args[0] == "corrupt" or e.args[0] == "bad_input", f"error code {e.args}")

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
        check(seen != sorted(seen), "shuffled")
        # Resume: the state after 3 batches of epoch 1 gives the same next batches.
        next(loader), next(loader), next(loader)
        state = loader.state()
        check(state["epoch"] == 1 and state["position"] == 3, f"state {state}")
        want = [loader.last_samples.copy() for _ in [next(loader)]]
        other = dctchop.Loader(f"{d}/a.dcz", batch_size=5, seed=99, drop_last=False)
        other.restore(state)
        next(other)
        check(np.array_equal(other.last_samples, want[0]), "restore resumes at the same batch")
        # Two shards partition the samples.
        shards = [dctchop.Loader(f"{d}/a.dcz", batch_size=4, seed=3, rank=r, world=2,
                                 drop_last=False).epoch_order(0) for r in (0, 1)]
        both = np.concatenate(shards)
        check(sorted(both.tolist()) == list(range(37)), "shards partition the dataset")

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
