#!/usr/bin/python3
"""Reference SSIM values from scikit-image (Debian's python3-skimage) for tests/test_metrics.cpp.

The images are made by integer formulas that the C++ test repeats exactly, so only the SSIM
values need committing. Regenerate: /usr/bin/python3 tests/data/make_ssim_reference.py
"""
import json
import os

import numpy as np
import skimage
from skimage.metrics import structural_similarity


def lcg(seed, n):
    out, s = [], seed
    for _ in range(n):
        s = (s * 1103515245 + 12345) % (1 << 31)
        out.append((s >> 16) & 0x7FFF)
    return np.array(out, dtype=np.int64)


def make(kind, h, w):
    i, j = np.mgrid[0:h, 0:w].astype(np.int64)
    if kind == "noise":  # u8 noise and a perturbed copy
        a = lcg(1, h * w).reshape(h, w) % 256
        b = np.clip(a + (lcg(2, h * w).reshape(h, w) % 17) - 8, 0, 255)
        return a.astype(np.float64), b.astype(np.float64), 255.0
    if kind == "pattern":  # u8 structure and a smoothed copy
        a = (i * i + 3 * j * j + i * j) % 256
        b = (a + np.roll(a, 1, axis=1)) // 2
        return a.astype(np.float64), b.astype(np.float64), 255.0
    if kind == "constant_same":
        a = np.full((h, w), 100.0)
        return a, a.copy(), 255.0
    if kind == "constant_shift":
        return np.full((h, w), 100.0), np.full((h, w), 101.0), 255.0
    if kind == "float_field":  # float data, range given as max - min of a
        a = (i * i * 0.01 - j * 0.25 + (i * j % 5) * 0.5).astype(np.float64)
        b = a + 0.05 * ((i + 2 * j) % 3 - 1)
        return a, b, float(a.max() - a.min())
    raise ValueError(kind)


CASES = [("noise", 32, 40), ("noise", 7, 7), ("pattern", 20, 9), ("pattern", 7, 30),
         ("constant_same", 16, 16), ("constant_shift", 12, 10), ("float_field", 25, 19)]

rows = []
for kind, h, w in CASES:
    a, b, r = make(kind, h, w)
    s = structural_similarity(a, b, data_range=r, win_size=7, gaussian_weights=False,
                              use_sample_covariance=True, K1=0.01, K2=0.03)
    rows.append({"kind": kind, "h": h, "w": w, "range": r, "ssim": float(s)})

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "ssim_reference.json"), "w") as f:
    json.dump({"generator": "scikit-image " + skimage.__version__, "cases": rows}, f, indent=1)
    f.write("\n")
