#!/usr/bin/python3
"""Benchmark inputs (not committed): u8 256x256x3 images and f32 512x512 fields, made with the
same generators as the bundled samples. Usage: make_bench_data.py OUTDIR [N_IMAGES] [N_FIELDS]"""
import argparse
import os
import sys

from script_args import positive_int


p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("out", metavar="OUTDIR")
p.add_argument("n_img", metavar="N_IMAGES", nargs="?", type=positive_int, default=64,
               help="u8 256x256x3 images (default 64)")
p.add_argument("n_fld", metavar="N_FIELDS", nargs="?", type=positive_int, default=16,
               help="f32 512x512 fields (default 16)")
args = p.parse_args()

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sample_data"))
import make_samples  # noqa: E402

out, n_img, n_fld = args.out, args.n_img, args.n_fld
os.makedirs(out, exist_ok=True)
np.save(os.path.join(out, "images_256x256x3_u8.npy"), make_samples.images(n_img, 256, 256))
np.save(os.path.join(out, "fields_512x512_f32.npy"), make_samples.fields(n_fld, 512, 512))

# A real dataset when Debian's dataset-fashion-mnist is installed (scripts/setup.sh does):
# the 10,000 test images, 28x28 u8, and their labels.
FMNIST = "/usr/share/datasets/fashion-mnist"
if os.path.exists(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")):
    import gzip
    with gzip.open(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")) as f:
        imgs = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    np.save(os.path.join(out, "fashion_mnist_t10k_u8.npy"), imgs)
    np.save(os.path.join(out, "fashion_mnist_t10k_labels.npy"), labels)
