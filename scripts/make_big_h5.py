#!/usr/bin/python3
"""Makes a large u8 NHWC HDF5 dataset for scripts/bench_hdf5.sh (not committed).

Usage: make_big_h5.py [--reuse] OUT.h5 GIB [FILTER]   (e.g. 4). The images are the bundled sample's
generator at 256x256x3, 64 distinct ones repeated with shifts, chunked 16 images per chunk (all
of them when fewer); the labels go to /train/labels. FILTER compresses the images: none (the
default), gzip (level 4, h5py's default), lzf, blosc (lz4, byte shuffle; Debian's
hdf5-filter-plugin-blosc-serial) or lz4 (hdf5plugin's LZ4(), written by Debian's
hdf5-filter-plugin). The file is written as OUT.h5.tmp and renamed when complete; with --reuse
an existing OUT.h5 that this script made with the same GIB and FILTER is kept.
"""
import argparse
import math
import os
import sys

from script_args import positive_float, run_main, written_atomically

FILTERS = ("none", "gzip", "lzf", "blosc", "lz4")
# The HDF5 filter ids each FILTER puts in the images' pipeline (what --reuse checks).
FILTER_IDS = {"none": [], "gzip": [1], "lzf": [32000], "blosc": [32001], "lz4": [32004]}
PER = 256 * 256 * 3
STAMP = "make_big_h5"  # attribute of the root group, written last: the file is complete


def images_for(gib):
    return int(math.ceil(gib * (1 << 30) / PER))


def matches(path, n, how):
    """True when `path` is a complete file of this script's with n images and filter `how`."""
    import h5py
    try:
        with h5py.File(path, "r") as f:
            d = f["train/images"]
            plist = d.id.get_create_plist()
            ids = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
            return (f.attrs.get(STAMP) == f"{n} {how}" and d.shape == (n, 256, 256, 3) and
                    d.dtype == "u1" and ids == FILTER_IDS[how] and
                    f["train/labels"].shape == (n,))
    except Exception:  # missing, truncated, or not ours: make it again
        return False


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out", metavar="OUT.h5")
    p.add_argument("gib", metavar="GIB", type=positive_float, help="size of the images in GiB")
    p.add_argument("how", metavar="FILTER", nargs="?", default="none", choices=FILTERS,
                   help="none (default), gzip, lzf, blosc or lz4")
    p.add_argument("--reuse", action="store_true",
                   help="keep an existing OUT.h5 made by this script with the same GIB and FILTER")
    args = p.parse_args()
    out, how = args.out, args.how
    n = images_for(args.gib)
    if args.reuse and matches(out, n, how):
        print(out, n, "images", os.path.getsize(out) / (1 << 30), "GiB", how, "(kept)")
        return 0

    import h5py
    import numpy as np
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sample_data"))
    import make_samples  # noqa: E402

    filters = {}
    if how in ("blosc", "lz4"):
        try:
            import hdf5plugin
        except ImportError:
            sys.exit(f"make_big_h5.py: FILTER {how} needs hdf5plugin (Debian's python3-hdf5plugin)")
        filters = dict(hdf5plugin.Blosc(cname="lz4")) if how == "blosc" else dict(hdf5plugin.LZ4())
    elif how != "none":
        filters = dict(compression=how)

    if os.path.exists(out):
        os.remove(out)  # not kept: its space is needed for the new one
    bank = make_samples.images(64, 256, 256)
    with written_atomically(out) as tmp, h5py.File(tmp, "w") as f:
        d = f.create_dataset("train/images", shape=(n, 256, 256, 3), dtype=np.uint8,
                             chunks=(min(16, n), 256, 256, 3), **filters)
        block = 256
        for i in range(0, n, block):
            k = min(block, n - i)
            idx = (np.arange(i, i + k) * 7) % 64
            shift = (i // block) % 32
            d[i:i + k] = np.roll(bank[idx], shift, axis=2)
        f.create_dataset("train/labels", data=(np.arange(n) % 10).astype(np.int64))
        f.attrs[STAMP] = f"{n} {how}"
    print(out, n, "images", os.path.getsize(out) / (1 << 30), "GiB", how)
    return 0


if __name__ == "__main__":
    run_main(main, "make_big_h5.py")  # SIGTERM too: the partial file is removed below
