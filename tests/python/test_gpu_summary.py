#!/usr/bin/env python3
"""scripts/gpu_summary.py on a benchmark report made here: each device figure is set against
its target (decode 50%, encode 25% of the memory bandwidth), errors are shown, and the faster
kernel layout is named with its mean over the chops."""
import json
import os
import subprocess
import sys
import tempfile

from checks import check, failures, finish


def bench(name, gbs, frac):
    return {"name": name, "GB/s": gbs, "bw_frac": frac}


def main():
    script = sys.argv[1]
    report = {"benchmarks": [
        bench("BM_device_decode_u8_256x256x3/chop:1/manual_time", 3000.0, 0.62),
        bench("BM_device_decode_u8_256x256x3/chop:4/manual_time", 1000.0, 0.40),
        bench("BM_device_decode_blocks_u8_256x256x3/chop:1/manual_time", 500.0, 0.10),
        bench("BM_device_decode_blocks_u8_256x256x3/chop:4/manual_time", 700.0, 0.14),
        # Only in the blocks layout: left out of both layouts' means.
        bench("BM_device_decode_blocks_u8_256x256x3/chop:2/manual_time", 5000.0, 0.90),
        # An aggregate of repetitions: not a figure of its own.
        dict(bench("BM_device_decode_u8_256x256x3/chop:4/manual_time_stddev", 3.0, 0.001),
             run_type="aggregate"),
        bench("BM_device_encode_f32_512x512/chop:2/manual_time", 900.0, 0.24),
        bench("BM_device_encode_blocks_f32_512x512/chop:2/manual_time", 1200.0, 0.30),
        bench("BM_device_decode_gemm_u8_256x256x3/chop:1/manual_time", 80.0, 0.02),
        {"name": "BM_host_decode_u8_256x256x3/chop:2/real_time", "error_occurred": True,
         "error_message": "no CUDA device"},
        bench("BM_host_encode_u8_256x256x3/chop:1/real_time", 10.0, None),
        bench("BM_device_copy_u8_256x256x3/iterations:20/manual_time", 1900.0, 0.79),
        bench("BM_device_memset_u8_256x256x3/iterations:20/manual_time", 3700.0, 0.77),
        bench("BM_host_encode_u8_256x256x3/chop:4/real_time", 14.0, None),
        bench("BM_host_pinned_encode_u8_256x256x3/chop:1/real_time", 30.0, None),
        bench("BM_host_pinned_encode_u8_256x256x3/chop:4/real_time", 36.0, None),
        bench("BM_host_pinned_measure_u8_256x256x3/chop:4/real_time", 25.0, None),
        {"name": "BM_loader_device_u8_256x256x3/chop:4/iterations:48/real_time", "GB/s": 40.5,
         "images/s": 206000.0, "pcie_GB/s": 10.125},
        {"name": "BM_loader_host_u8_256x256x3/chop:4/iterations:48/real_time", "GB/s": 12.0,
         "images/s": 61000.0},
        {"name": "BM_loader_device_u8_256x256x3/chop:4/threads:8/iterations:48/real_time",
         "GB/s": 90.0, "images/s": 457000.0, "pcie_GB/s": 22.5},
        {"name": "BM_loader_device_u8_256x256x3/chop:2/threads:1/iterations:48/real_time",
         "GB/s": 30.0, "images/s": 152000.0, "pcie_GB/s": 1.875},
    ]}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.json")
        with open(path, "w") as f:
            json.dump(report, f)
        r = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
    out = r.stdout
    lines = out.splitlines()
    check(r.returncode == 1, f"a report with a failed benchmark: exit code {r.returncode}: {r.stderr}")
    check("1 benchmark(s) FAILED" in out, "the failed benchmarks are counted")

    def row(prefix, chop):
        return next((l for l in lines if l.startswith(prefix) and l.split()[4] == str(chop)), "")

    check("50%: met" in row("device decode lines u8_256x256x3", 1), "62% meets decode's 50%")
    check("50%: MISSED" in row("device decode lines u8_256x256x3", 4), "40% misses decode's 50%")
    check("25%: MISSED" in row("device encode lines f32_512x512", 2), "24% misses encode's 25%")
    check("25%: met" in row("device encode blocks f32_512x512", 2), "30% meets encode's 25%")
    check("met" not in row("device decode gemm u8_256x256x3", 1) and
          "MISSED" not in row("device decode gemm u8_256x256x3", 1), "the GEMM form has no target")
    check("error: no CUDA device" in out, "errors are shown")
    # Means over the chops: lines 2000 against blocks 600 GB/s; blocks 1200 against 900.
    check("decode u8_256x256x3: lines 2000.0 GB/s, blocks 600.0 GB/s -> lines is faster (3.33x)" in out,
          "the faster decode layout")
    check("encode f32_512x512: lines 900.0 GB/s, blocks 1200.0 GB/s -> blocks is faster (1.33x)" in out,
          "the faster encode layout")
    pinned = row("host encode pinned u8_256x256x3", 4).split()
    check(len(pinned) > 5 and pinned[5] == "36.0", "a pinned host row")
    measure = row("host measure pinned u8_256x256x3", 4)
    check(measure.split()[5:6] == ["25.0"] and "met" not in measure and "MISSED" not in measure,
          "the device measure's row, which has no target")
    check("host encode u8_256x256x3: pageable 12.0 GB/s, pinned 33.0 GB/s (2.75x)" in out,
          "pinned against pageable host buffers")
    check(row("device decode lines u8_256x256x3", 4).count("MISSED") == 1 and
          sum(1 for l in lines if l.startswith("device decode lines u8_256x256x3")) == 2,
          "aggregate rows are left out")
    check("IMPLAUSIBLE" not in out, "no implausible figure")
    check("device copy u8_256x256x3: 1900.0 GB/s of data, 79.0% of the peak moved" in out and
          "device memset u8_256x256x3: 3700.0 GB/s of data, 77.0% of the peak moved" in out,
          "the ceilings")
    check(not any(l.startswith("device copy") and "MISSED" in l for l in lines), "a ceiling has no target")
    check("loader device u8_256x256x3 chop 4: 40.5 GB/s (206,000 images/s), 10.1 GB/s of "
          "coefficients over PCIe" in lines and
          "loader host u8_256x256x3 chop 4: 12.0 GB/s (61,000 images/s)" in lines,
          "the training ingest of the loader, on the device and on the host")
    check("loader device u8_256x256x3 chop 4, 8 threads a batch: 90.0 GB/s (457,000 images/s), "
          "22.5 GB/s of coefficients over PCIe" in lines and
          "loader device u8_256x256x3 chop 2: 30.0 GB/s (152,000 images/s), 1.9 GB/s of "
          "coefficients over PCIe" in lines,
          "the loader's threads a batch, named where more than one")
    # Without the failed benchmark: exit 0, missed targets and all.
    clean = {"benchmarks": [b for b in report["benchmarks"] if not b.get("error_occurred")]}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.json")
        with open(path, "w") as f:
            json.dump(clean, f)
        r2 = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
    check(r2.returncode == 0 and "FAILED" not in r2.stdout, f"a clean report: exit code {r2.returncode}")
    # A loader benchmark that failed is a failed benchmark too.
    stalled = {"benchmarks": clean["benchmarks"] + [
        {"name": "BM_loader_device_u8_256x256x3/chop:1/iterations:48/real_time",
         "error_occurred": True, "error_message": "no CUDA device"}]}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.json")
        with open(path, "w") as f:
            json.dump(stalled, f)
        r7 = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
    check(r7.returncode == 1 and "loader device u8_256x256x3 chop 1: error: no CUDA device" in r7.stdout
          and "1 benchmark(s) FAILED" in r7.stdout,
          f"a failed loader benchmark: exit code {r7.returncode}, {r7.stdout[-300:]!r}")
    # A report cut short (the benchmark stopped at its time limit): said, exit 1, no traceback.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.json")
        with open(path, "w") as f:
            f.write(json.dumps(report)[:200])
        r3 = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
    check(r3.returncode == 1 and "incomplete" in r3.stdout and "Traceback" not in r3.stderr,
          f"a cut report: exit code {r3.returncode}, {r3.stdout!r} {r3.stderr[-200:]!r}")
    # A figure above 95% of the peak: a timing error, said, and exit 1.
    fast = {"benchmarks": clean["benchmarks"] + [
        bench("BM_device_encode_u8_256x256x3/chop:1/manual_time", 4700.0, 0.98)]}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.json")
        with open(path, "w") as f:
            json.dump(fast, f)
        r4 = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
    check(r4.returncode == 1 and "IMPLAUSIBLE" in r4.stdout and "1 figure(s) IMPLAUSIBLE" in r4.stdout,
          f"an implausible figure: exit code {r4.returncode}, {r4.stdout[-300:]!r}")
    # Against a baseline: each row gives the earlier figure of the same benchmark and the
    # ratio; rows without one say nothing; an unreadable baseline is said and left out.
    old = {"benchmarks": [bench("BM_device_decode_u8_256x256x3/chop:1/manual_time", 1500.0, 0.31),
                          bench("BM_device_decode_blocks_u8_256x256x3/chop:4/manual_time", 700.0, 0.14)]}
    with tempfile.TemporaryDirectory() as d:
        path, base = os.path.join(d, "bench.json"), os.path.join(d, "old.json")
        with open(path, "w") as f:
            json.dump(clean, f)
        with open(base, "w") as f:
            json.dump(old, f)
        r5 = subprocess.run([sys.executable, script, "--baseline", base, path], capture_output=True, text=True)
        r6 = subprocess.run([sys.executable, script, "--baseline", os.path.join(d, "none.json"), path],
                            capture_output=True, text=True)
    lines5 = r5.stdout.splitlines()

    def row5(prefix, chop):
        return next((l for l in lines5 if l.startswith(prefix) and l.split()[4] == str(chop)), "")

    check(r5.returncode == 0, f"with a baseline: exit code {r5.returncode}: {r5.stderr}")
    check(row5("device decode lines u8_256x256x3", 1).endswith("was 1500.0 (2.00x)"),
          f"the earlier figure and the ratio: {row5('device decode lines u8_256x256x3', 1)!r}")
    check(row5("device decode blocks u8_256x256x3", 4).endswith("was 700.0 (1.00x)"), "an equal figure")
    check("was" not in row5("device decode lines u8_256x256x3", 4), "no earlier figure, nothing said")
    check(r6.returncode == 0 and "baseline" in r6.stderr and "was" not in r6.stdout,
          f"a missing baseline is said and left out: {r6.returncode} {r6.stderr!r}")
    if failures:
        print(out)
    return finish("gpu summary")


if __name__ == "__main__":
    sys.exit(main())
