#!/usr/bin/python3
"""Makes a large .npz of u8 NHWC images for the .npz input figures (not committed).

Usage: make_big_npz.py OUT.npz GIB [stored|deflated]   (e.g. 1). The images are
make_big_h5.py's (the bundled sample's generator at 256x256x3, 64 distinct ones repeated with
shifts) as x_train, with y_train labels; stored is np.savez (the default), deflated is
np.savez_compressed. Also writes OUT.npy (the same images, np.save) unless it exists, for
comparison. Holds the whole array in memory.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sample_data"))
import make_samples  # noqa: E402

out, gib = sys.argv[1], float(sys.argv[2])
how = sys.argv[3] if len(sys.argv) > 3 else "stored"
per = 256 * 256 * 3
n = int(np.ceil(gib * (1 << 30) / per))
bank = make_samples.images(64, 256, 256)
x = np.empty((n, 256, 256, 3), np.uint8)
block = 256
for i in range(0, n, block):
    k = min(block, n - i)
    x[i:i + k] = np.roll(bank[(np.arange(i, i + k) * 7) % 64], (i // block) % 32, axis=2)
y = (np.arange(n) % 10).astype(np.int64)
{"stored": np.savez, "deflated": np.savez_compressed}[how](out, x_train=x, y_train=y)
npy = os.path.splitext(out)[0] + ".npy"
if not os.path.exists(npy):
    np.save(npy, x)
print(out, n, "images", os.path.getsize(out) / (1 << 30), "GiB", how)
