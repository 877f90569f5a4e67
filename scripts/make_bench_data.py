#!/usr/bin/python3
"""Benchmark inputs (not committed): u8 256x256x3 images and f32 512x512 fields, made with the
same generators as the bundled samples. Usage: make_bench_data.py OUTDIR [N_IMAGES] [N_FIELDS]"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sample_data"))
import make_samples  # noqa: E402

out = sys.argv[1]
n_img = int(sys.argv[2]) if len(sys.argv) > 2 else 64
n_fld = int(sys.argv[3]) if len(sys.argv) > 3 else 16
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
