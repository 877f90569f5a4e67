#!/usr/bin/python3
"""Pictures for dctchop eval (Debian's python3-matplotlib and python3-numpy).

Rate-distortion plot from `dctchop eval --csv` output (ratio against PSNR, one line per
block size and coefficient type, each point labelled with its chop; rows without a finite
PSNR, lossless or failed, are left out and counted on stderr):

    dctchop eval data.npy --chop 1,2,3,4,5,6,8 --coeff f16,bf16,i16 --csv > rd.csv
    scripts/plot_eval.py rd rd.csv -o rd.png

Side-by-side of original and decoded samples at several chops (runs dctchop in a temporary
folder; nothing else is written):

    scripts/plot_eval.py samples data.npy --chops 1,2,4,6 -o s.png

(--dctchop PATH names the program; the default is the repository's build/apps/dctchop.)
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile

from script_args import positive_int

# matplotlib and numpy are imported when a picture is drawn: --help, and a clear message
# where they are missing, need neither.

# The repository's build, wherever the script is run from.
DEFAULT_DCTCHOP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "build", "apps", "dctchop")


def pyplot():
    """matplotlib's pyplot, drawing to files (Agg), or a one-line reason it is not there."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        sys.exit(f"plot_eval.py: needs matplotlib for {sys.executable} ({e}; Debian's "
                 "python3-matplotlib, which scripts/setup.sh installs, is /usr/bin/python3's)")
    return plt


RD_COLUMNS = ("block", "chop", "coeff", "ratio", "psnr_db")


def rd_series(rows):
    """The curves of an rd plot: {(block, coeff): [(ratio, psnr, chop), ...] by ratio} of the
    rows with a finite PSNR, and how many rows were left out: {"lossless": n, "undefined": n,
    "failed": n}. An empty PSNR is lossless where max_abs_error is 0, else undefined (R = 0:
    constant float data that did not come back exactly)."""
    series, left = {}, {"lossless": 0, "undefined": 0, "failed": 0}
    for r in rows:
        if r.get("error"):
            left["failed"] += 1  # a setting that cannot hold the data
            continue
        if not r["psnr_db"]:
            try:
                exact = float(r.get("max_abs_error") or "nan") == 0.0
            except ValueError:
                exact = False
            left["lossless" if exact else "undefined"] += 1  # no point on a finite axis
            continue
        key = (int(r["block"]), r["coeff"])
        series.setdefault(key, []).append((float(r["ratio"]), float(r["psnr_db"]), r["chop"]))
    return {k: sorted(v) for k, v in sorted(series.items())}, left


def read_rd_rows(path):
    """The rows of `dctchop eval --csv` output (a BOM before it, as spreadsheets write, is
    taken); a clear exit for anything else."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            missing = [c for c in RD_COLUMNS if c not in (reader.fieldnames or [])]
            if not missing:
                return list(reader)
    except (UnicodeDecodeError, csv.Error):
        missing = None
    sys.exit(f"plot_eval.py: {path} is not `dctchop eval --csv` output" +
             (f" (no column {', '.join(missing)})" if missing else "") +
             f"; make it with: dctchop eval DATA --csv > {path}")


def plot_rd(args):
    series, left = rd_series(read_rd_rows(args.csv))
    words = {"lossless": "lossless (infinite PSNR)", "undefined": "undefined (PSNR of R = 0)",
             "failed": "failed"}
    said = [f"{n} {words[k]}" for k, n in left.items() if n]
    if said:
        print("plot_eval.py: left out " + " and ".join(said) + " row" +
              ("s" if sum(left.values()) > 1 else ""), file=sys.stderr)
    if not series:
        sys.exit("plot_eval.py: no finite rows in " + args.csv)
    plt = pyplot()
    blocks = sorted({b for b, _ in series})
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for (block, coeff), pts in series.items():
        label = coeff if len(blocks) == 1 else f"B={block} {coeff}"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        for x, y, k in pts:
            ax.annotate("K=" + k, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("compression ratio (archive bytes included, log scale)")
    ax.set_ylabel("PSNR (dB)")
    ax.set_title(args.title or "dctchop: ratio against PSNR, block " +
                 ", ".join(str(b) for b in blocks))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="coefficients" if len(blocks) == 1 else "block, coefficients")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)


def find_dctchop(name):
    """The program to run: a path as given, or a bare name looked up on PATH."""
    path = name if os.sep in name else shutil.which(name)
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        sys.exit(f"plot_eval.py: no dctchop program at {name}"
                 + (" (build the project, or give --dctchop PATH)" if name == DEFAULT_DCTCHOP else ""))
    return path


def sample_images(x):
    """The samples of an array as dctchop lays it out by default (HW: one sample; NHW; NHWC
    where the last axis is 1 to 4, else NCHW where the second is), each as an image to show:
    HxW, or HxWx3 / HxWx4 (a sample of 2 planes, or more than 4, shows its first)."""
    if x.ndim == 2:
        return [x]
    if x.ndim == 3:
        return list(x)
    if x.ndim != 4:
        sys.exit(f"plot_eval.py: an array of {x.ndim} axes; dctchop takes 2 to 4")
    if 1 <= x.shape[-1] <= 4:
        hwc = x
    elif 1 <= x.shape[1] <= 4:
        hwc = x.transpose(0, 2, 3, 1)
    else:
        sys.exit(f"plot_eval.py: shape {x.shape}: neither axis 1 nor the last is 1 to 4 planes")
    out = []
    for s in hwc:
        out.append(s if s.shape[-1] in (3, 4) else s[..., 0])
    return out


def plot_samples(args):
    args.dctchop = find_dctchop(args.dctchop)
    import numpy as np
    try:
        data = np.load(args.npy, mmap_mode="r", allow_pickle=False)
    except ValueError as e:  # not a .npy (an HDF5 file, say), or an object array
        sys.exit(f"plot_eval.py: {args.npy} is not a .npy file of numbers ({e})")
    chops = args.chops
    samples = 1 if data.ndim == 2 else data.shape[0]
    n = min(args.count, samples)
    if n < 1:
        sys.exit(f"plot_eval.py: {args.npy} holds no sample")
    plt = pyplot()
    decoded = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in chops:
            arc, out = os.path.join(tmp, "a.dcz"), os.path.join(tmp, "d.npy")
            if os.path.exists(out):
                os.remove(out)  # (so that a program that writes nothing is found at every chop)
            subprocess.run([args.dctchop, "compress", args.npy, "-o", arc, "--chop", str(k),
                            "-f", "-q", "--no-quality"], check=True, stdout=subprocess.DEVNULL)
            subprocess.run([args.dctchop, "decompress", arc, "-o", out, "-f", "-q",
                            "--samples", "0:%d" % n], check=True, stdout=subprocess.DEVNULL)
            if not os.path.isfile(out):
                sys.exit(f"plot_eval.py: {args.dctchop} wrote no decoded samples (is it dctchop?)")
            decoded[k] = sample_images(np.load(out))
    original = sample_images(np.asarray(data if data.ndim == 2 else data[:n]))
    # One grey scale for every panel: u8's whole range (images), else the range of the
    # originals shown (12-bit data in u16 was black at u16's range).
    if data.dtype == np.uint8:
        lo, hi = 0.0, 255.0
    else:
        lo = float(min(np.min(img) for img in original))
        hi = float(max(np.max(img) for img in original))
        hi = hi if hi > lo else lo + 1.0  # (constant data: any scale shows it)
    cols = 1 + len(chops)
    fig, axes = plt.subplots(n, cols, figsize=(1.6 * cols, 1.6 * n), squeeze=False)
    for i in range(n):
        for c in range(cols):
            img = np.asarray(original[i] if c == 0 else decoded[chops[c - 1]][i])
            ax = axes[i][c]
            if img.ndim == 3:  # colour: matplotlib wants [0, 1] floats or u8
                img = np.clip((img.astype(np.float64) - lo) / (hi - lo), 0, 1)
                ax.imshow(img, interpolation="nearest")
            else:
                ax.imshow(img, cmap="gray", vmin=lo, vmax=hi, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title("original" if c == 0 else "chop %d" % chops[c - 1], fontsize=9)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)


def chop_list(text):
    try:
        chops = [int(k) for k in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of whole numbers: {text!r}")
    if any(k < 1 for k in chops):
        raise argparse.ArgumentTypeError(f"chops are at least 1: {text!r}")
    return chops


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    rd = sub.add_parser("rd", help="rate-distortion plot from eval --csv")
    rd.add_argument("csv")
    rd.add_argument("-o", "--output", required=True)
    rd.add_argument("--title")
    sm = sub.add_parser("samples", help="original and decoded samples side by side")
    sm.add_argument("npy")
    sm.add_argument("--dctchop", default=DEFAULT_DCTCHOP,
                    help="the dctchop program (default: the repository's build/apps/dctchop)")
    sm.add_argument("--chops", type=chop_list, default="1,2,4,6")
    sm.add_argument("--count", type=positive_int, default=4, help="samples shown (default 4)")
    sm.add_argument("-o", "--output", required=True)
    args = p.parse_args()
    try:
        plot_rd(args) if args.what == "rd" else plot_samples(args)
    except OSError as e:  # an input that is missing or unreadable
        sys.exit(f"plot_eval.py: {e}")
    except subprocess.CalledProcessError as e:  # dctchop said why on stderr
        sys.exit(f"plot_eval.py: {os.path.basename(e.cmd[0])} {e.cmd[1]} failed (exit code {e.returncode})")


if __name__ == "__main__":
    main()
