#!/usr/bin/python3
"""dctchop's quality figures against an independent implementation: scikit-image's
structural_similarity (the definition DESIGN.md names) and PSNR computed here with NumPy.

Usage: check_quality_skimage.py DCTCHOP_BINARY SCRATCH_FOLDER

For u8 data in NHWC, NCHW and NHW layouts (one with 7 interleaved planes of 1024 columns, which
dctchop measures in groups), u16 data, f32 data and f16 data (NHWC), runs `dctchop compress --json`, then
`dctchop decompress` to .npy, and compares the SSIM and PSNR that compress reported with the
ones computed here from the original and the decoded arrays: SSIM is the mean over every
plane of scikit-image's index (7x7 uniform window, K1 0.01, K2 0.03, sample covariance, data
range 255 / 65535 / max - min of the original), in float64. u8 SSIM uses exact integer
window sums in dctchop, so it must agree to 1e-12; the others to 1e-9. Exits 1 with a clear message on the
first mismatch.

Run with Debian's /usr/bin/python3 (python3-numpy, python3-skimage).
"""
import json
import os
import shutil
import sys
import tempfile

from checks import Mismatch, psnr, run

try:
    import numpy as np
    from skimage.metrics import structural_similarity
except ImportError as e:  # pragma: no cover - environment problem, not a dctchop failure
    print(f"check_quality_skimage: cannot import numpy/skimage ({e}); install python3-numpy "
          "and python3-skimage (scripts/setup.sh does) and run with /usr/bin/python3",
          file=sys.stderr)
    sys.exit(1)


def planes_of(a, layout):
    """The 2-D planes of a batch, in dctchop's order (sample, then plane)."""
    if layout == "nhwc":
        return [a[n, :, :, c] for n in range(a.shape[0]) for c in range(a.shape[3])]
    if layout == "nchw":
        return [a[n, c] for n in range(a.shape[0]) for c in range(a.shape[1])]
    return [a[n] for n in range(a.shape[0])]  # nhw


def expected(x, y, layout, data_range):
    xs, ys = planes_of(x, layout), planes_of(y, layout)
    # In float64: scikit-image computes float32 input in float32 (about 1e-7 off), and
    # dctchop computes every type in double.
    ssim = float(np.mean([structural_similarity(p.astype(np.float64), q.astype(np.float64),
                                                data_range=data_range, win_size=7,
                                                use_sample_covariance=True)
                          for p, q in zip(xs, ys)]))
    return ssim, psnr(x, y, data_range)


def case(dct, work, name, x, layout, chop, data_range, tol):
    src, arc, out = (os.path.join(work, name + e) for e in (".npy", ".dcz", ".out.npy"))
    np.save(src, x)
    j = json.loads(run(dct, ["compress", src, "-o", arc, "--chop", str(chop), "--layout", layout,
                             "--json", "-f"])[0])
    run(dct, ["decompress", arc, "-o", out, "-f", "-q"])
    y = np.load(out)
    if y.shape != x.shape or y.dtype != x.dtype:
        raise Mismatch(f"{name}: decoded {y.shape} {y.dtype}, original {x.shape} {x.dtype}")
    ssim, want_psnr = expected(x, y, layout, data_range)
    q = j["quality"]
    if q.get("ssim") is None or abs(q["ssim"] - ssim) > tol:
        raise Mismatch(f"{name}: dctchop SSIM {q.get('ssim')!r}, scikit-image {ssim!r} "
                       f"(tolerance {tol})")
    if abs(q["psnr_db"] - want_psnr) > 1e-9:
        raise Mismatch(f"{name}: dctchop PSNR {q['psnr_db']!r}, NumPy {want_psnr!r}")
    if q["ssim_planes"] != len(planes_of(x, layout)):
        raise Mismatch(f"{name}: {q['ssim_planes']} SSIM planes, expected "
                       f"{len(planes_of(x, layout))}")
    print(f"{name}: SSIM {q['ssim']:.15f} vs {ssim:.15f}, PSNR {q['psnr_db']:.6f} dB")


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    dct = sys.argv[1]
    os.makedirs(sys.argv[2], exist_ok=True)
    work = tempfile.mkdtemp(prefix="quality-", dir=sys.argv[2])
    rng = np.random.default_rng(7)

    def smooth(shape, scale, offset):  # a gradient with noise: SSIM well below 1 at chop 2
        idx = np.indices(shape).sum(axis=0).astype(np.float64)
        return offset + scale * np.sin(idx / 9.0) + rng.normal(0, scale / 6, shape)

    try:
        u8 = lambda s: smooth(s, 60, 128).clip(0, 255).astype(np.uint8)
        case(dct, work, "u8_nhwc", u8((6, 40, 33, 3)), "nhwc", 4, 255.0, 1e-12)
        case(dct, work, "u8_nchw", u8((5, 3, 29, 31)), "nchw", 2, 255.0, 1e-12)
        case(dct, work, "u8_nhw", u8((4, 23, 50)), "nhw", 1, 255.0, 1e-12)
        case(dct, work, "u8_7_planes_wide", u8((2, 9, 1024, 7)), "nhwc", 2, 255.0, 1e-12)
        u16 = smooth((3, 30, 26), 15000, 30000).clip(0, 65535).astype(np.uint16)
        case(dct, work, "u16_nhw", u16, "nhw", 2, 65535.0, 1e-9)
        f32 = smooth((4, 31, 37), 2.5, -1.0).astype(np.float32)
        case(dct, work, "f32_nhw", f32, "nhw", 2, float(f32.max()) - float(f32.min()), 1e-9)
        f16 = smooth((3, 27, 35, 2), 300.0, 50.0).astype(np.float16)
        case(dct, work, "f16_nhwc", f16, "nhwc", 2, float(f16.max()) - float(f16.min()), 1e-9)
    except Mismatch as e:
        print(f"check_quality_skimage: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("check_quality_skimage: all figures agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
