#!/usr/bin/python3
"""The training check of issue 6 (a benchmark, not a test): a small CNN trained on CPU on
Fashion-MNIST (Debian's dataset-fashion-mnist), once on the original images and once each on
archives at chop 2, 4 and 6 (block 8), decoding at ingest through dctchop.torch.DecodeLayer
(two matmuls in the model's forward). Every model is tested on the original test images and
on the test images compressed the same way (what a model trained and served on compressed
data sees).
Prints test accuracy and training images per second; writes scripts/results/. The archives
store the labels as the dataset has them (u8); they are widened to int64 as each batch is used.

Usage: PYTHONPATH=build/python scripts/train_fmnist.py [EPOCHS] [BUILD-DIR]   (default 3, build)
       --limit N: the first N training and test images only, a quick check of the script
       itself (nothing is written to scripts/results/)"""
import argparse
import datetime
import gzip
import os
import subprocess
import sys
import tempfile
import time

from script_args import positive_int

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(SCRIPTS)
FMNIST = "/usr/share/datasets/fashion-mnist"
EPOCHS = 3
BUILD = os.path.join(REPO, "build")
LIMIT = None
BATCH = 128
SEED = 1


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("epochs", metavar="EPOCHS", nargs="?", type=positive_int, default=EPOCHS,
                   help="training epochs per model (default %(default)s)")
    p.add_argument("build", metavar="BUILD-DIR", nargs="?", default=BUILD,
                   help="the build folder with apps/dctchop and python/ (default: the repository's build)")
    p.add_argument("--limit", metavar="N", type=positive_int,
                   help=f"use the first N (at least {BATCH}) training and test images only; "
                        "for checking the script, no results file")
    args = p.parse_args()
    if args.limit is not None and args.limit < BATCH:
        p.error(f"--limit must be at least one batch ({BATCH})")
    if not os.path.exists(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")):
        p.error(f"no Fashion-MNIST in {FMNIST} (Debian's dataset-fashion-mnist; scripts/setup.sh installs it)")
    binary = os.path.join(args.build, "apps", "dctchop")
    if not os.access(binary, os.X_OK):
        p.error(f"no dctchop program at {binary} (build it, or give the build folder)")
    return args


def idx(name, offset):
    with gzip.open(os.path.join(FMNIST, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(x[i:i + 1000]).argmax(1) for i in range(0, len(x), 1000)])
    model.train()
    return float((pred == y).float().mean())


def train(batches, n_batches, test_x, test_y, ingest=None):
    """batches(): an iterator of (x, y) for one epoch; ingest turns x into (N, 1, 28, 28)."""
    torch.manual_seed(SEED)
    model = cnn()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    seen, t0 = 0, time.perf_counter()
    for _ in range(EPOCHS):
        for x, y in batches():
            if ingest is not None:
                x = ingest(x)
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            seen += len(y)
    rate = seen / (time.perf_counter() - t0)
    return accuracy(model, test_x, test_y), rate, model


def main():
    torch.set_num_threads(os.cpu_count() or 1)
    n = LIMIT  # None: all of them
    train_x = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)[:n]
    train_y = idx("train-labels-idx1-ubyte.gz", 8)[:n]  # u8, as stored in the archives
    test_x = torch.from_numpy(idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)[:n] / 255.0).float()
    test_y = torch.from_numpy(idx("t10k-labels-idx1-ubyte.gz", 8)[:n].astype(np.int64))
    rows = []

    # The original images, shuffled with a fixed seed each epoch. CrossEntropyLoss takes int64
    # class indices.
    xs = torch.from_numpy(train_x.reshape(-1, 1, 28, 28) / 255.0).float()
    ys = torch.from_numpy(train_y.astype(np.int64))
    gen = torch.Generator().manual_seed(SEED)

    def original():
        perm = torch.randperm(len(ys), generator=gen)
        for i in range(0, len(perm) - BATCH + 1, BATCH):
            j = perm[i:i + BATCH]
            yield xs[j], ys[j]

    acc, rate, _ = train(original, len(ys) // BATCH, test_x, test_y)
    rows.append(("original", "1.00", acc, acc, rate))
    print(f"original: test accuracy {acc:.4f}, {rate:.0f} images/s", flush=True)

    binary = os.path.join(BUILD, "apps", "dctchop")
    with tempfile.TemporaryDirectory() as d:
        np.save(f"{d}/x.npy", train_x)
        np.save(f"{d}/y.npy", train_y)
        np.save(f"{d}/t.npy", (test_x[:, 0] * 255.0).round().to(torch.uint8).numpy())
        for chop in (2, 4, 6):
            dcz = f"{d}/x{chop}.dcz"
            subprocess.run([binary, "compress", f"{d}/x.npy", "--labels", f"{d}/y.npy", "-o", dcz,
                            "--chop", str(chop), "-q", "--no-quality"], check=True)
            ratio = train_x.nbytes / os.path.getsize(dcz)
            archive = dctchop.Archive(dcz)
            loader = dctchop.Loader(dcz, batch_size=BATCH, seed=SEED, decode=False)
            decode = DecodeLayer.for_archive(dcz)

            def compressed():  # the archive's u8 labels, widened for CrossEntropyLoss here
                for raw, y in loader.epoch():
                    yield coefficient_planes(raw, archive), torch.from_numpy(y.astype(np.int64))

            def ingest(planes):  # on the device, in the model's input pipeline: two matmuls
                return torch.clamp(decode(planes), 0, 255) / 255.0

            acc, rate, model = train(compressed, loader.batches_per_epoch, test_x, test_y, ingest)
            # The test set through the same compression (decoded by the C++ decoder).
            tdcz = f"{d}/t{chop}.dcz"
            subprocess.run([binary, "compress", f"{d}/t.npy", "-o", tdcz, "--chop", str(chop),
                            "-q", "--no-quality"], check=True)
            t = dctchop.Archive(tdcz)
            test_dec = torch.from_numpy(t.read(0, t.samples).reshape(-1, 1, 28, 28) / 255.0).float()
            acc_dec = accuracy(model, test_dec, test_y)
            rows.append((f"chop {chop}", f"{ratio:.2f}", acc, acc_dec, rate))
            print(f"chop {chop}: ratio {ratio:.2f}, test accuracy {acc:.4f} (original test "
                  f"images), {acc_dec:.4f} (compressed test images), {rate:.0f} images/s",
                  flush=True)

    base = rows[0][2]
    lines = [f"# Fashion-MNIST training check, {datetime.date.today()}, {EPOCHS} epochs, "
             f"batch {BATCH}, Adam 1e-3, CPU ({os.cpu_count()} cores)",
             "| training data | ratio | accuracy, original test images | vs original | "
             "accuracy, test images compressed alike | vs original | training images/s |",
             "|---|---|---|---|---|---|---|"]
    for name, ratio, acc, acc_dec, rate in rows:
        lines.append(f"| {name} | {ratio} | {acc:.4f} | {100 * (acc - base):+.2f} pts | "
                     f"{acc_dec:.4f} | {100 * (acc_dec - base):+.2f} pts | {rate:.0f} |")
    text = "\n".join(lines)
    print(text)
    if LIMIT is not None:
        print(f"(--limit {LIMIT}: a check of the script; no results file written)")
        return
    results = os.path.join(SCRIPTS, "results")
    os.makedirs(results, exist_ok=True)
    with open(os.path.join(results, f"train-fmnist-{datetime.date.today()}.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    _args = parse_args()  # before the imports below, which take seconds (torch)
    EPOCHS, BUILD, LIMIT = _args.epochs, _args.build, _args.limit
    import numpy as np
    import torch
    try:
        import dctchop
    except ImportError:  # PYTHONPATH not set: the build folder's module
        sys.path.insert(0, os.path.join(BUILD, "python"))
        try:
            import dctchop
        except ImportError as e:
            sys.exit(f"train_fmnist.py: cannot import dctchop ({e}); build it with the Python "
                     f"module, or set PYTHONPATH=BUILD-DIR/python")
    from dctchop.torch import DecodeLayer, coefficient_planes
    main()
