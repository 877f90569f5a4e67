#!/usr/bin/python3
"""Makes a large .npz of u8 NHWC images for the .npz input figures (not committed).

Usage: make_big_npz.py OUT.npz GIB [stored|deflated]   (e.g. 1). The images are
make_big_h5.py's (the bundled sample's generator at 256x256x3, 64 distinct ones repeated with
shifts) as x_train, with y_train labels; stored is np.savez (the default), deflated is
np.savez_compressed. Also writes OUT.npy (the same images, np.save) unless it exists, for
comparison. Holds the whole array in memory. Each file is written under a temporary name
beside it and renamed when complete.
"""
import argparse
import math
import os
import sys

from script_args import positive_float, run_main, written_atomically

MODES = ("stored", "deflated")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out", metavar="OUT.npz")
    p.add_argument("gib", metavar="GIB", type=positive_float, help="size of the images in GiB")
    p.add_argument("how", metavar="MODE", nargs="?", default="stored", choices=MODES,
                   help="stored (np.savez, the default) or deflated (np.savez_compressed)")
    args = p.parse_args()  # checked before the array is built

    import numpy as np
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sample_data"))
    import make_samples  # noqa: E402

    # As np.savez names it: OUT.npz stays, any other name gets ".npz" added.
    out = args.out if args.out.endswith(".npz") else args.out + ".npz"
    npy = os.path.splitext(args.out)[0] + ".npy"
    per = 256 * 256 * 3
    n = int(math.ceil(args.gib * (1 << 30) / per))
    bank = make_samples.images(64, 256, 256)
    x = np.empty((n, 256, 256, 3), np.uint8)
    block = 256
    for i in range(0, n, block):
        k = min(block, n - i)
        x[i:i + k] = np.roll(bank[(np.arange(i, i + k) * 7) % 64], (i // block) % 32, axis=2)
    y = (np.arange(n) % 10).astype(np.int64)
    save = {"stored": np.savez, "deflated": np.savez_compressed}[args.how]
    with written_atomically(out) as tmp, open(tmp, "wb") as f:
        save(f, x_train=x, y_train=y)
    if not os.path.exists(npy):
        with written_atomically(npy) as tmp, open(tmp, "wb") as f:
            np.save(f, x)
    print(out, n, "images", os.path.getsize(out) / (1 << 30), "GiB", args.how)
    return 0


if __name__ == "__main__":
    run_main(main, "make_big_npz.py")
