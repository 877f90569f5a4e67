#!/usr/bin/python3
"""A real HDF5 client against dctchop: h5py writes the input, dctchop compresses and
decompresses it, and h5py and NumPy read the results back.

Usage: check_h5_client.py DCTCHOP_BINARY SCRATCH_FOLDER

Writes a u8 NHWC dataset (chunked, gzip, inside a group) and int64 labels with h5py; runs
`dctchop compress FILE.h5:/train/images --labels FILE.h5:/train/labels`, then
`dctchop decompress` to an HDF5 dataset and to a .npy file; opens both with h5py and NumPy and
compares them with the originals: shape, dtype, PSNR (computed here) above a threshold and equal
to the one dctchop reports, labels equal, dctchop_* attributes present and sensible. Also checks
a lossless u8 round trip (chop 8), an f32 dataset with big-endian storage, that a decoded
HDF5 file can be compressed again, a float16 dataset (h5py's 2-byte IEEE float) back as float16,
and float16, bool and enum labels (named, and found by the labels rule). Exits 1 with a clear message on the first mismatch.

Run with Debian's /usr/bin/python3 (python3-h5py, python3-numpy).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from checks import Mismatch, psnr, run

try:
    import h5py
    import numpy as np
except ImportError as e:  # pragma: no cover - environment problem, not a dctchop failure
    print(f"check_h5_client: cannot import h5py/numpy ({e}); install python3-h5py and "
          "python3-numpy and run with /usr/bin/python3", file=sys.stderr)
    sys.exit(1)


def check(cond, message):
    if not cond:
        raise Mismatch(message)


def smooth_u8(n, h, w, c):
    s, y, x, k = np.meshgrid(np.arange(n), np.arange(h), np.arange(w), np.arange(c),
                             indexing="ij")
    f = 128 + 60 * np.sin(0.11 * x + 0.3 * s + k) + 40 * np.cos(0.07 * y - 0.2 * k) + 0.5 * s
    return np.clip(np.rint(f), 0, 255).astype(np.uint8)


def smooth_f32(n, h, w):
    s, y, x = np.meshgrid(np.arange(n), np.arange(h), np.arange(w), indexing="ij")
    return (3.0 * np.sin(0.15 * x + 0.4 * s) * np.cos(0.1 * y) + 0.01 * x * y - 1.5).astype(
        np.float32)


def check_attrs(dset, archive, chop, psnr_reported):
    attrs = dict(dset.attrs)
    for key in ("dctchop_archive", "dctchop_block", "dctchop_chop", "dctchop_coeff",
                "dctchop_layout", "dctchop_first_sample"):
        check(key in attrs, f"{dset.file.filename}:{dset.name}: attribute {key} is missing "
                            f"(has {sorted(attrs)})")
    check(int(attrs["dctchop_block"]) == 8, f"dctchop_block is {attrs['dctchop_block']}, not 8")
    check(int(attrs["dctchop_chop"]) == chop, f"dctchop_chop is {attrs['dctchop_chop']}, not {chop}")
    check(int(attrs["dctchop_first_sample"]) == 0, "dctchop_first_sample is not 0")
    for key in ("dctchop_archive", "dctchop_coeff", "dctchop_layout"):
        # Variable-length UTF-8 strings, as h5py writes a str: a fixed-length one reads as bytes.
        check(isinstance(attrs[key], str), f"{key} is a {type(attrs[key]).__name__}, not a str")
    archive_attr = attrs["dctchop_archive"]
    check(archive in archive_attr, f"dctchop_archive {archive_attr!r} does not name {archive}")
    if psnr_reported is None:
        check("dctchop_psnr_db" not in attrs or not np.isfinite(attrs["dctchop_psnr_db"]),
              "a lossless archive has a finite dctchop_psnr_db")
    else:
        check("dctchop_psnr_db" in attrs, "attribute dctchop_psnr_db is missing")
        check(abs(float(attrs["dctchop_psnr_db"]) - psnr_reported) < 1e-9,
              f"dctchop_psnr_db {attrs['dctchop_psnr_db']} differs from the reported "
              f"{psnr_reported}")


def u8_round_trip(binary, work):
    images = smooth_u8(12, 32, 24, 3)
    rng = np.random.default_rng(7)
    labels = rng.integers(-5, 1000, size=12, dtype=np.int64)
    src = os.path.join(work, "train.h5")
    with h5py.File(src, "w") as f:
        g = f.create_group("train")
        g.create_dataset("images", data=images, chunks=(5, 32, 24, 3), compression="gzip",
                         compression_opts=4)
        g.create_dataset("labels", data=labels)

    out, _ = run(binary, ["compress", "train.h5:/train/images", "--labels",
                          "train.h5:/train/labels", "-o", "train.dcz", "--chop", "4", "--json",
                          "--chunk-mb", "0.01"], work)
    report = json.loads(out)
    check(report.get("chunks", 0) > 1, f"expected several archive chunks: {report.get('chunks')}")
    reported = report["quality"]["psnr_db"]
    run(binary, ["decompress", "train.dcz", "-o", "out.h5:/images", "-q"], work)
    run(binary, ["decompress", "train.dcz", "-o", "out.npy", "-q", "--labels-out", "labels.npy"],
        work)

    with h5py.File(os.path.join(work, "out.h5"), "r") as f:
        check("images" in f, f"out.h5 lacks /images: {list(f)}")
        d = f["images"]
        check(d.shape == images.shape, f"out.h5:/images shape {d.shape} != {images.shape}")
        check(d.dtype == np.uint8, f"out.h5:/images dtype {d.dtype} != uint8")
        check(d.chunks is None, "out.h5:/images is chunked, not one contiguous block")
        decoded = d[...]
        p = psnr(images, decoded, 255.0)
        check(p > 30.0, f"PSNR of out.h5:/images is {p:.2f} dB, below 30 dB")
        check(abs(p - reported) < 1e-6, f"PSNR {p} differs from the reported {reported}")
        check("labels" in f, f"out.h5 lacks /labels: {list(f)}")
        got = f["labels"][...]
        check(got.dtype == labels.dtype and np.array_equal(got, labels),
              f"out.h5:/labels {got!r} != {labels!r}")
        check_attrs(d, "train.dcz", 4, reported)
        source = d.attrs.get("dctchop_source")
        if isinstance(source, bytes):
            source = source.decode()
        check(source is not None and "train.h5" in source,
              f"dctchop_source {source!r} does not name train.h5")

    npy = np.load(os.path.join(work, "out.npy"))
    check(npy.shape == images.shape and npy.dtype == np.uint8,
          f"out.npy is {npy.dtype} {npy.shape}, not uint8 {images.shape}")
    check(np.array_equal(npy, decoded), "out.npy differs from out.h5:/images")
    lab = np.load(os.path.join(work, "labels.npy"))
    check(lab.dtype == np.int64 and np.array_equal(lab, labels), "labels.npy differs")

    # chop 8 of 8: lossless for u8.
    run(binary, ["compress", "train.h5", "--dataset", "/train/images", "-o", "exact.dcz",
                 "--chop", "8", "-q"], work)
    run(binary, ["decompress", "exact.dcz", "-o", "exact.h5", "-q"], work)
    with h5py.File(os.path.join(work, "exact.h5"), "r") as f:
        check("data" in f, f"exact.h5 lacks the default /data: {list(f)}")
        check(np.array_equal(f["data"][...], images), "chop 8 of 8 is not exact for u8")

    # A decoded HDF5 file is a valid input again (the dataset is chosen: one image-like).
    _, err = run(binary, ["compress", "out.h5", "-o", "again.dcz", "--chop", "8"], work)
    check("using dataset /images" in err, f"no 'using dataset /images' on stderr: {err!r}")


def f32_big_endian_round_trip(binary, work):
    fields = smooth_f32(6, 20, 28)
    src = os.path.join(work, "fields.h5")
    with h5py.File(src, "w") as f:
        f.create_dataset("sim/fields", data=fields.astype(">f4"))
    out, _ = run(binary, ["compress", "fields.h5:/sim/fields", "-o", "fields.dcz", "--chop", "4",
                          "--json"], work)
    reported = json.loads(out)["quality"]["psnr_db"]
    run(binary, ["decompress", "fields.dcz", "-o", "fields_out.h5:/fields", "-q"], work)
    run(binary, ["decompress", "fields.dcz", "-o", "fields_out.npy", "-q"], work)
    with h5py.File(os.path.join(work, "fields_out.h5"), "r") as f:
        d = f["fields"]
        check(d.shape == fields.shape, f"fields shape {d.shape} != {fields.shape}")
        check(d.dtype == np.float32, f"fields dtype {d.dtype} != float32")
        decoded = d[...]
        check("labels" not in f, "no labels were stored, yet /labels was written")
    peak = float(fields.max() - fields.min())
    p = psnr(fields, decoded, peak)
    check(p > 30.0, f"PSNR of the f32 fields is {p:.2f} dB, below 30 dB")
    check(abs(p - reported) < 1e-6, f"f32 PSNR {p} differs from the reported {reported}")
    npy = np.load(os.path.join(work, "fields_out.npy"))
    check(npy.dtype == np.float32 and np.array_equal(npy, decoded),
          "fields_out.npy differs from fields_out.h5:/fields")


def labels_round_trip(binary, work, images, labels, want, what):
    """compress IMAGES --labels LABELS, decompress to HDF5 (labels beside as /labels) and, with
    --labels-out, to a .npy of the labels: both must hold `want`, dtype included."""
    run(binary, ["compress", images, "--labels", labels, "-o", "l.dcz", "-q", "-f"], work)
    run(binary, ["decompress", "l.dcz", "-o", "l_out.h5", "-q", "-f"], work)
    run(binary, ["decompress", "l.dcz", "-o", "l_out.npy", "-q", "-f", "--labels-out",
                 "l_labels.npy"], work)
    with h5py.File(os.path.join(work, "l_out.h5"), "r") as f:
        got = f["labels"][...]
    check(got.dtype == want.dtype and np.array_equal(got, want),
          f"{what} in HDF5: {got.dtype} {got!r} != {want!r}")
    npy = np.load(os.path.join(work, "l_labels.npy"))
    check(npy.dtype == want.dtype and np.array_equal(npy, want), f"{what} in .npy: {npy.dtype} {npy!r}")


def float16_labels(binary, work):
    """float16 labels (HDF5 1.10 has no predefined half type): read from h5py's file, written
    to HDF5 as h5py writes them, and back in .npy, equal to the originals; also from .npy."""
    images = smooth_u8(7, 16, 16, 1)[..., 0]
    labels = np.linspace(0.7, 0.72, 7).astype(np.float16)
    with h5py.File(os.path.join(work, "f16.h5"), "w") as f:
        f.create_dataset("x", data=images)
        f.create_dataset("y", data=labels)
    np.save(os.path.join(work, "y16.npy"), labels)
    for source in ("f16.h5:/y", "y16.npy"):
        labels_round_trip(binary, work, "f16.h5:/x", source, labels, f"float16 labels from {source}")


def float16_data(binary, work):
    """A float16 dataset as h5py writes it: compressed at chop 8 and decompressed to HDF5 and
    .npy, it comes back as float16 (h5py and NumPy read it as such), within f16's rounding."""
    x = (40.0 * smooth_f32(5, 20, 14)).astype(np.float16)
    with h5py.File(os.path.join(work, "h16.h5"), "w") as f:
        f.create_dataset("fields", data=x)
    run(binary, ["compress", "h16.h5:/fields", "-o", "h16.dcz", "--chop", "8", "-f", "-q"], work)
    run(binary, ["decompress", "h16.dcz", "-o", "h16_back.h5:/fields", "-f", "-q"], work)
    run(binary, ["decompress", "h16.dcz", "-o", "h16_back.npy", "-f", "-q"], work)
    with h5py.File(os.path.join(work, "h16_back.h5"), "r") as f:
        back = f["fields"][()]
    npy = np.load(os.path.join(work, "h16_back.npy"))
    for what, got in (("HDF5", back), (".npy", npy)):
        check(got.dtype == np.float16 and got.shape == x.shape,
              f"float16 data back in {what}: {got.dtype} {got.shape}")
        check(np.allclose(got.astype(np.float64), x.astype(np.float64), rtol=2.0 ** -10, atol=1e-3),
              f"float16 data back in {what}: off by up to "
              f"{np.abs(got.astype(np.float64) - x.astype(np.float64)).max()}")


def bool_and_enum_labels(binary, work):
    """h5py's bool (an int8 enum FALSE/TRUE) and another integer enum as labels: read as their
    values, bool staying bool through the archive, back into HDF5 (as h5py writes bool) and
    into .npy."""
    images = smooth_u8(6, 16, 16, 1)[..., 0]
    flags = np.array([True, False, True, True, False, False])
    colors = np.array([0, 2, 1, 2, 0, 1], np.uint8)
    with h5py.File(os.path.join(work, "enum.h5"), "w") as f:
        f.create_dataset("x", data=images)
        f.create_dataset("flags", data=flags, chunks=(4,), compression="gzip")
        f.create_dataset("colors", data=colors,
                         dtype=h5py.enum_dtype({"red": 0, "green": 1, "blue": 2}, basetype="u1"))
    for name, want in (("flags", flags), ("colors", colors)):
        labels_round_trip(binary, work, "enum.h5:/x", f"enum.h5:/{name}", want, f"{name} labels")
    # A file named without a dataset: the labels rule takes bool and enum datasets too.
    with h5py.File(os.path.join(work, "only_flags.h5"), "w") as f:
        f.create_dataset("labels", data=flags)
    with h5py.File(os.path.join(work, "only_colors.h5"), "w") as f:
        f.create_dataset("y", data=colors, dtype=h5py.enum_dtype({"red": 0, "green": 1, "blue": 2},
                                                                 basetype="u1"))
    labels_round_trip(binary, work, "enum.h5:/x", "only_flags.h5", flags, "bool labels found")
    labels_round_trip(binary, work, "enum.h5:/x", "only_colors.h5", colors, "enum labels found")
    # ... and the image rule never takes a bool dataset, not even one shaped like the images.
    with h5py.File(os.path.join(work, "masked.h5"), "w") as f:
        f.create_dataset("pixels", data=images)
        f.create_dataset("mask", data=images > 100)
    _, err = run(binary, ["compress", "masked.h5", "-o", "m.dcz", "-f"], work)
    check("using dataset /pixels of masked.h5" in err, f"the images of masked.h5: {err}")
    # ... nor an enum one (a segmentation's classes), and a file of only such datasets says
    # why none is taken.
    with h5py.File(os.path.join(work, "seg.h5"), "w") as f:
        f.create_dataset("pixels", data=images)
        f.create_dataset("seg", data=(images > 100).astype(np.uint8),
                         dtype=h5py.enum_dtype({"bg": 0, "fg": 1}, basetype="u1"))
    _, err = run(binary, ["compress", "seg.h5", "-o", "s.dcz", "-f"], work)
    check("using dataset /pixels of seg.h5" in err, f"the images of seg.h5: {err}")
    with h5py.File(os.path.join(work, "onlybool.h5"), "w") as f:
        f.create_dataset("mask", data=images > 100)
    r = subprocess.run([binary, "compress", "onlybool.h5", "-o", "o.dcz"], cwd=work,
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 3 and "(numeric but not bool or enum, 2 or more axes" in r.stderr
          and f"/mask {images.shape} bool" in r.stderr, f"onlybool.h5: {r.returncode} {r.stderr}")


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    base = sys.argv[2]
    os.makedirs(base, exist_ok=True)
    work = tempfile.mkdtemp(prefix="python_h5py_client.", dir=base)
    try:
        u8_round_trip(binary, work)
        f32_big_endian_round_trip(binary, work)
        float16_labels(binary, work)
        float16_data(binary, work)
        bool_and_enum_labels(binary, work)
    except Mismatch as e:
        print(f"check_h5_client: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"check_h5_client: ok (h5py {h5py.__version__}, numpy {np.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
