#!/usr/bin/python3
"""Pictures for dctchop eval (Debian's python3-matplotlib and python3-numpy).

Rate-distortion plot from `dctchop eval --csv` output (ratio against PSNR, one line per
coefficient type, each point labelled with its chop):

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

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# The repository's build, wherever the script is run from.
DEFAULT_DCTCHOP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "build", "apps", "dctchop")


def plot_rd(args):
    rows = []
    with open(args.csv) as f:
        for r in csv.DictReader(f):
            if r.get("error") or not r["psnr_db"]:
                continue  # a setting that cannot hold the data, or lossless (infinite PSNR)
            rows.append(r)
    if not rows:
        sys.exit("plot_eval.py: no finite rows in " + args.csv)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for coeff in sorted({r["coeff"] for r in rows}):
        pts = sorted((float(r["ratio"]), float(r["psnr_db"]), r["chop"]) for r in rows
                     if r["coeff"] == coeff)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=coeff)
        for x, y, k in pts:
            ax.annotate("K=" + k, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("compression ratio (archive bytes included, log scale)")
    ax.set_ylabel("PSNR (dB)")
    ax.set_title(args.title or "dctchop: ratio against PSNR, block %s" % rows[0]["block"])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="coefficients")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)


def find_dctchop(name):
    """The program to run: a path as given, or a bare name looked up on PATH."""
    path = name if os.sep in name else shutil.which(name)
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        sys.exit(f"plot_eval.py: no dctchop program at {name}"
                 + (" (build the project, or give --dctchop PATH)" if name == DEFAULT_DCTCHOP else ""))
    return path


def plot_samples(args):
    args.dctchop = find_dctchop(args.dctchop)
    data = np.load(args.npy, mmap_mode="r")
    chops = args.chops
    n = min(args.count, data.shape[0])
    decoded = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in chops:
            arc, out = os.path.join(tmp, "a.dcz"), os.path.join(tmp, "d.npy")
            subprocess.run([args.dctchop, "compress", args.npy, "-o", arc, "--chop", str(k),
                            "-f", "-q", "--no-quality"], check=True)
            subprocess.run([args.dctchop, "decompress", arc, "-o", out, "-f", "-q",
                            "--samples", "0:%d" % n], check=True)
            decoded[k] = np.load(out)
    # One grey scale for every panel: the dtype's range for integers, the data's for floats.
    if np.issubdtype(data.dtype, np.integer):
        lo, hi = np.iinfo(data.dtype).min, np.iinfo(data.dtype).max
    else:
        lo, hi = float(np.min(data[:n])), float(np.max(data[:n]))
    cols = 1 + len(chops)
    fig, axes = plt.subplots(n, cols, figsize=(1.6 * cols, 1.6 * n), squeeze=False)
    for i in range(n):
        for c in range(cols):
            img = np.asarray(data[i]) if c == 0 else decoded[chops[c - 1]][i]
            ax = axes[i][c]
            if img.ndim == 3 and img.shape[-1] == 1:
                img = img[..., 0]
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
    sm.add_argument("--count", type=int, default=4)
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
