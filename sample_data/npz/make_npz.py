#!/usr/bin/python3
"""Regenerates the .npz files of sample_data/npz for tests/test_npz.cpp and the CLI tests: the
same arrays written by numpy's np.savez (ZIP members stored) and np.savez_compressed (members
deflated), so that dctchop reads what numpy writes.

    /usr/bin/python3 sample_data/npz/make_npz.py

mnist_like(.npz, _compressed.npz): keras's mnist.npz keys. x_train u8 (10, 28, 28), y_train u8
(10,), x_test u8 (4, 28, 28), y_test u8 (4,).
misc(.npz, _compressed.npz): images f32 (3, 20, 24), fortran u8 (5, 16, 16) in Fortran order,
big u16 (2, 8, 8) big-endian, names a string array (not numeric).

Every value follows a formula that the tests compute again (see value_* below and
tests/test_npz.cpp); the script checks that numpy reads each file back to the same arrays.
"""
import os

import numpy as np

HERE = os.path.relpath(os.path.dirname(os.path.abspath(__file__)))


def images_u8(n, first, h=28, w=28):
    """x[k, i, j] = ((first + k) * 37 + i * 11 + j * 5 + (i * j) % 13) % 256."""
    k, i, j = np.meshgrid(np.arange(n) + first, np.arange(h), np.arange(w), indexing="ij")
    return ((k * 37 + i * 11 + j * 5 + (i * j) % 13) % 256).astype(np.uint8)


def arrays():
    mnist = {
        "x_train": images_u8(10, 0),
        "y_train": (np.arange(10) * 3 % 10).astype(np.uint8),
        "x_test": images_u8(4, 100),
        "y_test": (np.arange(4) * 7 % 10).astype(np.uint8),
    }
    k, i, j = np.meshgrid(np.arange(3), np.arange(20), np.arange(24), indexing="ij")
    kf, i_f, jf = np.meshgrid(np.arange(5), np.arange(16), np.arange(16), indexing="ij")
    kb, ib, jb = np.meshgrid(np.arange(2), np.arange(8), np.arange(8), indexing="ij")
    misc = {
        # ((k * 7 + i * 3 + j) % 50) * 0.25 - 3: exact in float32
        "images": (((k * 7 + i * 3 + j) % 50) * 0.25 - 3.0).astype(np.float32),
        "fortran": np.asfortranarray(((kf * 13 + i_f * 5 + jf * 9) % 251).astype(np.uint8)),
        "big": (kb * 1000 + ib * 64 + jb).astype(">u2"),
        "names": np.array(["cat", "dog", "horse"]),
    }
    return {"mnist_like": mnist, "misc": misc}


def main():
    for stem, content in arrays().items():
        for suffix, save in (("", np.savez), ("_compressed", np.savez_compressed)):
            path = os.path.join(HERE, stem + suffix + ".npz")
            save(path, **content)
            with np.load(path) as back:
                assert sorted(back.files) == sorted(content), path
                for key, want in content.items():
                    got = back[key]
                    assert got.dtype == want.dtype and np.array_equal(got, want), (path, key)
            print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
