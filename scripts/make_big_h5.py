#!/usr/bin/python3
"""Makes a large u8 NHWC HDF5 dataset for scripts/bench_hdf5.sh (not committed).

Usage: make_big_h5.py OUT.h5 GIB [FILTER]   (e.g. 4). The images are the bundled sample's
generator at 256x256x3, 64 distinct ones repeated with shifts, chunked 16 images per chunk; the
labels go to /train/labels. FILTER compresses the images: none (the default), gzip (level 4,
h5py's default), lzf, blosc (lz4, byte shuffle; Debian's hdf5-filter-plugin-blosc-serial) or
lz4 (hdf5plugin's LZ4(), written by Debian's hdf5-filter-plugin).
"""
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sample_data"))
import make_samples  # noqa: E402

out, gib = sys.argv[1], float(sys.argv[2])
how = sys.argv[3] if len(sys.argv) > 3 else "none"
if how in ("blosc", "lz4"):
    import hdf5plugin
filters = {"none": {}, "gzip": dict(compression="gzip"), "lzf": dict(compression="lzf"),
           "blosc": dict(hdf5plugin.Blosc(cname="lz4")) if how == "blosc" else {},
           "lz4": dict(hdf5plugin.LZ4()) if how == "lz4" else {}}[how]
per = 256 * 256 * 3
n = int(np.ceil(gib * (1 << 30) / per))
bank = make_samples.images(64, 256, 256)
with h5py.File(out, "w") as f:
    d = f.create_dataset("train/images", shape=(n, 256, 256, 3), dtype=np.uint8,
                         chunks=(16, 256, 256, 3), **filters)
    block = 256
    for i in range(0, n, block):
        k = min(block, n - i)
        idx = (np.arange(i, i + k) * 7) % 64
        shift = (i // block) % 32
        d[i:i + k] = np.roll(bank[idx], shift, axis=2)
    f.create_dataset("train/labels", data=(np.arange(n) % 10).astype(np.int64))
print(out, n, "images", os.path.getsize(out) / (1 << 30), "GiB", how)
