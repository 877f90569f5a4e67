#!/usr/bin/python3
"""Regenerates the bundled sample datasets (deterministic). Run from the repository root:

    /usr/bin/python3 sample_data/make_samples.py            # the .npy inputs
    /usr/bin/python3 sample_data/make_samples.py --archives build/apps/dctchop

The second form also (re)makes the golden archives and the broken ones used by the tests.
"""
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.relpath(os.path.dirname(os.path.abspath(__file__)))


def images(n=16, h=32, w=32):
    """Small RGB 'photos': smooth colour gradients, a few discs and mild noise."""
    rng = np.random.default_rng(2026)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.empty((n, h, w, 3), np.uint8)
    for i in range(n):
        img = np.zeros((h, w, 3))
        for c in range(3):
            a, b, p = rng.uniform(-3, 3), rng.uniform(-3, 3), rng.uniform(0, 6.28)
            img[..., c] = 128 + 70 * np.sin(a * x / w + b * y / h + p)
        for _ in range(3):
            cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(3, 9)
            colour = rng.uniform(0, 255, 3)
            mask = (y - cy) ** 2 + (x - cx) ** 2 < r * r
            img[mask] = 0.3 * img[mask] + 0.7 * colour
        img += rng.normal(0, 4, img.shape)
        out[i] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return out


def fields(n=4, h=48, w=40):
    """Smooth float32 scientific fields (sums of Gaussian bumps)."""
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.zeros((n, h, w), np.float32)
    for i in range(n):
        f = np.zeros((h, w))
        for _ in range(5):
            cy, cx, s = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(4, 12)
            f += rng.uniform(-2, 2) * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * s * s))
        out[i] = f
    return out

def counts(n=4, h=32, w=32):
    """uint32 detector frames: Poisson counts of a smooth rate (about 50 to 3000), and two
    saturated pixels a frame at 2^32 - 1, as detectors mark them."""
    rng = np.random.default_rng(11)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.empty((n, h, w), np.uint32)
    for i in range(n):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        rate = 50 + 3000 * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * 8.0 ** 2))
        out[i] = rng.poisson(rate)
        out[i].flat[rng.choice(h * w, 2, replace=False)] = 2**32 - 1
    return out


def main():
    imgs = images()
    np.save(os.path.join(HERE, "images_u8_nhwc.npy"), imgs)
    np.save(os.path.join(HERE, "labels.npy"), (np.arange(len(imgs)) * 7 % 10).astype(np.int64))
    np.save(os.path.join(HERE, "fields_f32.npy"), fields())
    # The same fields in float16 (times 1000: well inside f16's range, its normal numbers)
    np.save(os.path.join(HERE, "fields_f16.npy"), (1000 * fields()).astype(np.float16))
    np.save(os.path.join(HERE, "counts_u32.npy"), counts())
    if len(sys.argv) == 3 and sys.argv[1] == "--archives":
        tool = sys.argv[2]
        arch = os.path.join(HERE, "archives")
        os.makedirs(arch, exist_ok=True)
        golden = os.path.join(arch, "images_b8_k4_f16.dcz")
        subprocess.run([tool, "compress", os.path.join(HERE, "images_u8_nhwc.npy"), "-o", golden,
                        "--chop", "4", "--chunk-mb", "0.005", "--labels",
                        os.path.join(HERE, "labels.npy"), "-f", "-q"], check=True)
        # fields_b8_k6_f32_offset0.dcz beside it is not made here: it was written by the
        # version before float data got its mean as the offset (2026-11-29), and is kept to
        # prove that such archives still decode. Nor is images_b8_k4_f16_no_sample_psnr.dcz,
        # the golden archive as written before the footer recorded per-sample PSNR (and before
        # the encode paired its sums, 2026-12-05): info must say "not recorded" for it.
        subprocess.run([tool, "compress", os.path.join(HERE, "fields_f32.npy"), "-o",
                        os.path.join(arch, "fields_b8_k6_f32.dcz"), "--chop", "6", "-f", "-q"],
                       check=True)
        subprocess.run([tool, "compress", os.path.join(HERE, "fields_f16.npy"), "-o",
                        os.path.join(arch, "fields_b8_k6_f16.dcz"), "--chop", "6", "-f", "-q"],
                       check=True)
        subprocess.run([tool, "compress", os.path.join(HERE, "counts_u32.npy"), "-o",
                        os.path.join(arch, "counts_b8_k4_f32.dcz"), "--chop", "4", "-f", "-q"],
                       check=True)
        data = open(golden, "rb").read()
        broken = os.path.join(arch, "broken")
        os.makedirs(broken, exist_ok=True)

        def put(name, blob):
            with open(os.path.join(broken, name), "wb") as f:
                f.write(blob)

        put("truncated.dcz", data[: len(data) // 2])
        flipped = bytearray(data)
        flipped[4096 + 64 + 100] ^= 0x01  # inside the first chunk's payload
        put("flipped_chunk.dcz", bytes(flipped))
        put("bad_magic.dcz", b"PK\x03\x04" + data[4:])
        newer = bytearray(data)
        newer[8:10] = struct.pack("<H", 2)
        put("version_2.dcz", bytes(newer))


if __name__ == "__main__":
    main()
