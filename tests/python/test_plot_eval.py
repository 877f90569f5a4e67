#!/usr/bin/env python3
"""scripts/plot_eval.py on dctchop's own output: the rd plot keeps one curve per block size and
coefficient type (it drew blocks 4, 8 and 16 as one line titled "block 4"), says what rows it
leaves out, and refuses input that is not `eval --csv` in one line; the samples picture takes
every layout dctchop takes (HW and NCHW failed with a traceback)."""
import importlib.util
import os
import subprocess
import sys
import tempfile

import numpy as np

from checks import check, finish


def plot(script, args, cwd):
    return subprocess.run([sys.executable, script] + args, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def main():
    script, dctchop, tmp_root = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(tmp_root, exist_ok=True)
    sys.path.insert(0, os.path.dirname(script))  # (its script_args.py, as when it is run)
    spec = importlib.util.spec_from_file_location("plot_eval", script)
    pe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pe)
    with tempfile.TemporaryDirectory(dir=tmp_root) as d:
        rng = np.random.default_rng(3)
        x = np.clip(rng.normal(128, 40, (6, 32, 32)), 0, 255).astype(np.uint8)
        np.save(os.path.join(d, "x.npy"), x)
        # eval of two blocks, chops up to the block (lossless at 4 for block 4, f16), and a
        # coefficient type that fails for u16 data past its range would be another row kind:
        # an i16 row of u8 data holds; a failed row is made by hand below.
        r = subprocess.run([dctchop, "eval", "x.npy", "--block", "4,8", "--chop", "1,2,4",
                            "--coeff", "f16", "--csv", "-q"], cwd=d, capture_output=True,
                           text=True, timeout=120)
        check(r.returncode == 0, f"eval --csv: {r.returncode} {r.stderr}")
        csv_text = r.stdout
        lines = csv_text.strip().splitlines()
        with open(os.path.join(d, "rd.csv"), "w") as f:
            f.write(csv_text + lines[-1].split(",")[0] + ",9,f16,,,,,,,,,cannot hold\n")
        rows = pe.read_rd_rows(os.path.join(d, "rd.csv"))
        series, left = pe.rd_series(rows)
        lossless, failed = left["lossless"], left["failed"]
        check(sorted(series) == [(4, "f16"), (8, "f16")], f"one curve per block: {sorted(series)}")
        check(len(series[(8, "f16")]) == 3, f"block 8 has chops 1, 2, 4: {series[(8, 'f16')]}")
        check([p[2] for p in series[(4, "f16")]] == ["1", "2"],
              f"block 4's chop 4 is lossless, left out: {series[(4, 'f16')]}")
        check((lossless, failed) == (1, 1), f"left out: {lossless} lossless, {failed} failed")
        for _, pts in series.items():
            check([p[0] for p in pts] == sorted(p[0] for p in pts), "points in ratio order")
        p = plot(script, ["rd", "rd.csv", "-o", "rd.png"], d)
        check(p.returncode == 0, f"rd: {p.returncode} {p.stderr}")
        check(os.path.getsize(os.path.join(d, "rd.png")) > 1000, "rd.png written")
        check("left out 1 lossless (infinite PSNR) and 1 failed rows" in p.stderr, p.stderr)
        # A BOM before the CSV (spreadsheets write one) is read; constant float data that
        # did not come back exactly has an undefined PSNR, not a lossless one.
        with open(os.path.join(d, "bom.csv"), "w", encoding="utf-8-sig") as f:
            f.write(csv_text)
        check(len(pe.read_rd_rows(os.path.join(d, "bom.csv"))) == len(lines) - 1, "BOM read")
        np.save(os.path.join(d, "c.npy"), np.full((4, 32, 32), 3.14159, np.float32))
        r = subprocess.run([dctchop, "eval", "c.npy", "--chop", "1,2", "--coeff", "f16",
                            "--offset", "0", "--csv", "-q"], cwd=d, capture_output=True,
                           text=True, timeout=120)
        import csv
        import io
        _, left_c = pe.rd_series(list(csv.DictReader(io.StringIO(r.stdout))))
        check(left_c == {"lossless": 0, "undefined": 2, "failed": 0}, f"constant: {left_c}")
        # eval's JSON, the program itself, or its table is not the CSV: one line, no traceback.
        p = plot(script, ["rd", dctchop, "-o", "b.png"], d)
        check(p.returncode == 1 and "Traceback" not in p.stderr and
              "is not `dctchop eval --csv` output" in p.stderr, f"binary: {p.stderr}")
        r = subprocess.run([dctchop, "eval", "x.npy", "--json", "-q"], cwd=d,
                           capture_output=True, text=True, timeout=120)
        with open(os.path.join(d, "rd.json"), "w") as f:
            f.write(r.stdout)
        p = plot(script, ["rd", "rd.json", "-o", "j.png"], d)
        check(p.returncode == 1 and "Traceback" not in p.stderr and
              "rd.json is not `dctchop eval --csv` output" in p.stderr, f"json: {p.stderr}")
        check(not os.path.exists(os.path.join(d, "j.png")), "no picture of the JSON")
        # Samples of every layout: HW (one sample), NHW, NHWC, NCHW.
        np.save(os.path.join(d, "hw.npy"), rng.random((40, 36)).astype(np.float32))
        np.save(os.path.join(d, "nchw.npy"),
                np.clip(rng.normal(128, 40, (3, 3, 20, 20)), 0, 255).astype(np.uint8))
        np.save(os.path.join(d, "nhwc.npy"),
                np.clip(rng.normal(128, 40, (3, 20, 20, 3)), 0, 255).astype(np.uint8))
        for name in ("hw.npy", "nchw.npy", "nhwc.npy", "x.npy"):
            p = plot(script, ["samples", name, "--chops", "1,2", "--dctchop", dctchop,
                              "-o", name + ".png"], d)
            check(p.returncode == 0 and os.path.getsize(os.path.join(d, name + ".png")) > 1000,
                  f"samples {name}: {p.returncode} {p.stderr[-400:]}")
        p = plot(script, ["samples", "x.npy", "--dctchop", "/bin/true", "-o", "t.png"], d)
        check(p.returncode == 1 and "/bin/true wrote no decoded samples (is it dctchop?)" in
              p.stderr, f"--dctchop /bin/true: {p.stderr}")
        p = plot(script, ["samples", "x.npy", "--count", "0", "--dctchop", dctchop,
                          "-o", "z.png"], d)
        check(p.returncode == 2 and "at least 1" in p.stderr, f"--count 0: {p.stderr}")
        images = pe.sample_images(np.zeros((2, 3, 5, 6)))
        check(len(images) == 2 and images[0].shape == (5, 6, 3), "NCHW shown as HxWx3")
        images = pe.sample_images(np.zeros((2, 5, 6, 1)))
        check(images[0].shape == (5, 6), "one plane shown grey")
    return finish("test_plot_eval")


if __name__ == "__main__":
    sys.exit(main())
