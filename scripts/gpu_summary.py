#!/usr/bin/env python3
"""Summarise the GPU benchmark's JSON (bench/bench_cuda.cpp, run by scripts/gpu-check.sh).

    scripts/gpu_summary.py [--baseline OLD.json] gpu-bench.json

Prints one row per device benchmark (GB/s of uncompressed data and the fraction of the H200's
4.8 TB/s counting bytes read plus written) against issue 5's targets: decode at 50% of the
memory bandwidth or more, encode at 25% or more. Then, for each operation and workload, the
faster kernel layout (lines or blocks) over the chops, which should be the default of
dctchop::cuda::kernel_layout, and what pinned host buffers gain over pageable ones through
the backend (the CLI's pipelines give it pinned ones), and the ceilings that the memory gives
(a device-to-device copy and a memset of the same data: what a kernel's fraction of the peak
is to be read against), and the training ingest of the GPU loader (GB/s of decoded batches
that loaders::device_loader hands out, and of coefficients over PCIe). Standard library only: it runs on the
GPU machine's python3. Exits 1 when the report has no rows, any benchmark failed (Google
Benchmark itself exits 0 after a benchmark's SkipWithError) or a figure is implausible (above
95% of the peak: a timing error), saying why on stderr when there are no rows or the file
cannot be read; a missed target is reported, not a failure. Aggregate rows (mean, median,
stddev of repetitions) are left out: the figures are the runs'.

--baseline OLD.json, an earlier run's report (gpu-check.sh passes the newest one recorded in
scripts/results/gpu-*/), adds to each row the figure that run had for the same benchmark and
how many times faster this one is: what a change to the kernels did. A baseline that cannot
be read is said on stderr and left out (it is not this run's failure).
"""
import json
import re
import sys

TARGET = {"encode": 0.25, "decode": 0.50}
PLAUSIBLE = 0.95  # no kernel streams at the memory's peak: a fraction above is a timing error
NAME = re.compile(r"BM_(device|host)_(?:(pinned)_)?(encode|decode|measure)(?:_(blocks|gemm))?_([^/]+)/chop:(\d+)")
CEILING = re.compile(r"BM_device_(copy|memset)_([^/]+)/")
LOADER = re.compile(r"BM_loader_(device|host)_([^/]+)/chop:(\d+)(?:/threads:(\d+))?")


def ceilings(report):
    """What the memory gives: a device-to-device copy (reads and writes the data) and a memset
    (writes it), as (what, workload, GB/s of data, fraction of the peak moved, error)."""
    for b in report.get("benchmarks", []):
        m = CEILING.match(b.get("name", ""))
        if m and b.get("run_type", "iteration") == "iteration":
            yield (m.group(1), m.group(2), b.get("GB/s"), b.get("bw_frac"),
                   b.get("error_message") if b.get("error_occurred") else None)


def loaders(report):
    """Training ingest (loaders::device_loader): (where, workload, chop, GB/s decoded,
    images/s, GB/s of coefficients over PCIe or None, error, threads making a batch)."""
    for b in report.get("benchmarks", []):
        m = LOADER.match(b.get("name", ""))
        if m and b.get("run_type", "iteration") == "iteration":
            yield (m.group(1), m.group(2), int(m.group(3)), b.get("GB/s"), b.get("images/s"),
                   b.get("pcie_GB/s"), b.get("error_message") if b.get("error_occurred") else None,
                   int(m.group(4) or 1))


def rows(report):
    for b in report.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":  # an aggregate of repetitions
            continue
        m = NAME.match(b.get("name", ""))
        if not m:
            continue
        where, pinned, op, variant, workload, chop = m.groups()
        if where == "host":  # host memory through the backend: staged, or pinned and direct
            variant = "pinned" if pinned else "pageable"
        yield {
            "where": where, "op": op, "variant": variant or "lines",
            "workload": workload, "chop": int(chop), "error": b.get("error_message") if b.get("error_occurred") else None,
            "gbs": b.get("GB/s"), "frac": b.get("bw_frac"),
        }


def means(all_rows, where, op, workload, variants):
    """Mean GB/s of each variant over the chops that every one of them has figures for (a
    chop that failed in one is left out of all: the means compare the same settings)."""
    def figures(variant):
        return {r["chop"]: r["gbs"] for r in all_rows if r["where"] == where and r["op"] == op and
                r["workload"] == workload and r["variant"] == variant and r["gbs"]}
    by_variant = {v: figures(v) for v in variants}
    common = set.intersection(*(set(f) for f in by_variant.values())) if by_variant else set()
    return {v: sum(f[c] for c in common) / len(common) for v, f in by_variant.items() if common}


def key(r):
    return (r["where"], r["op"], r["variant"], r["workload"], r["chop"])


def baseline_figures(path):
    """GB/s of each benchmark of an earlier report, or {} (said on stderr) when unreadable."""
    try:
        with open(path) as f:
            report = json.load(f)
        if not isinstance(report, dict):
            raise ValueError("not a Google Benchmark JSON report")
    except (OSError, UnicodeDecodeError, ValueError) as e:  # (JSONDecodeError is a ValueError)
        print(f"gpu_summary.py: baseline {path} left out: {e}", file=sys.stderr)
        return {}
    return {key(r): r["gbs"] for r in rows(report) if r["gbs"] and not r["error"]}


def main(path, baseline=None):
    try:
        with open(path) as f:
            try:
                report = json.load(f)
            except json.JSONDecodeError as e:  # the benchmark was stopped midway
                print(f"{path}: the benchmark's output is incomplete ({e}); see its console table")
                return 1
    except (OSError, UnicodeDecodeError) as e:  # missing (the benchmark did not start), unreadable
        print(f"gpu_summary.py: cannot read {path}: {e}", file=sys.stderr)
        return 1
    if not isinstance(report, dict):
        print(f"gpu_summary.py: {path} is not a Google Benchmark JSON report", file=sys.stderr)
        return 1
    all_rows = list(rows(report))
    was = baseline_figures(baseline) if baseline else {}
    if was:
        print(f"was: the same benchmark's GB/s in {baseline}, and this run's over it")
    print("GB/s: uncompressed bytes a second; of 4.8 TB/s: the bytes the kernels read plus write"
          " (input and\ncoefficients), of the H200's peak; the GEMM decode also moves f32 scratch,"
          " not counted,\nand has no target.")
    print(f"{'benchmark':44s} {'chop':>4s} {'GB/s':>9s} {'of 4.8 TB/s':>11s}  target")
    implausible = 0
    for r in all_rows:
        label = f"{r['where']} {r['op']} {r['variant']} {r['workload']}"
        if r["error"]:
            print(f"{label:44s} {r['chop']:4d} {'error: ' + r['error']}")
            continue
        frac = r["frac"]
        target = TARGET[r["op"]] if r["where"] == "device" and r["variant"] in ("lines", "blocks") else None
        verdict = ""
        if target is not None and frac is not None:
            verdict = f"{target:.0%}: {'met' if frac >= target else 'MISSED'}"
        if frac is not None and frac > PLAUSIBLE:
            verdict = f"IMPLAUSIBLE (over {PLAUSIBLE:.0%} of the peak: a timing error?)"
            implausible += 1
        gbs = f"{r['gbs']:9.1f}" if r["gbs"] is not None else f"{'-':>9s}"
        fr = f"{frac:11.1%}" if frac is not None else f"{'-':>11s}"
        before = was.get(key(r))
        then = f"  was {before:.1f} ({r['gbs'] / before:.2f}x)" if before and r["gbs"] else ""
        print(f"{label:44s} {r['chop']:4d} {gbs} {fr}  {verdict}{then}".rstrip())
    # The faster layout of the direct kernels, and what pinned host buffers (copied directly)
    # gain over pageable ones (staged): mean GB/s over the chops.
    print()
    for op in ("encode", "decode"):
        for workload in sorted({r["workload"] for r in all_rows}):
            mean = means(all_rows, "device", op, workload, ("lines", "blocks"))
            if len(mean) == 2:
                best = max(mean, key=mean.get)
                print(f"{op} {workload}: lines {mean['lines']:.1f} GB/s, blocks {mean['blocks']:.1f} GB/s"
                      f" -> {best} is faster ({mean[best] / min(mean.values()):.2f}x)")
    for op in ("encode", "decode"):
        for workload in sorted({r["workload"] for r in all_rows}):
            mean = means(all_rows, "host", op, workload, ("pageable", "pinned"))
            if len(mean) == 2:
                print(f"host {op} {workload}: pageable {mean['pageable']:.1f} GB/s, pinned "
                      f"{mean['pinned']:.1f} GB/s ({mean['pinned'] / mean['pageable']:.2f}x)")
    # The ceilings: a kernel's fraction of the peak is to be read against what a copy gets.
    tops = list(ceilings(report))
    if tops:
        print()
        print("ceilings (cudaMemcpyAsync device to device: reads and writes; cudaMemsetAsync: writes):")
    for what, workload, gbs, frac, err in tops:
        if err:
            print(f"device {what} {workload}: error: {err}")
        elif gbs is not None and frac is not None:
            print(f"device {what} {workload}: {gbs:.1f} GB/s of data, {frac:.1%} of the peak moved")
    # Training ingest: batches of an archive in memory decoded on the device (or the host's
    # cores) and handed to a training step that takes no time.
    ingest = list(loaders(report))
    if ingest:
        print()
        print("training ingest (device_loader, batches of 256 from an archive in memory; GB/s of"
              " decoded data;\nhost: decoded on one core, the loader's thread, and not copied):")
    for where, workload, chop, gbs, images, pcie, err, threads in ingest:
        label = f"loader {where} {workload} chop {chop}"
        if threads > 1:
            label += f", {threads} threads a batch"
        if err:
            print(f"{label}: error: {err}")
        elif gbs is not None:
            over = f", {pcie:.1f} GB/s of coefficients over PCIe" if pcie is not None else ""
            rate = f" ({images:,.0f} images/s)" if images is not None else ""
            print(f"{label}: {gbs:.1f} GB/s{rate}{over}")
    errors = (sum(1 for r in all_rows if r["error"]) + sum(1 for t in tops if t[4]) +
              sum(1 for i in ingest if i[6]))
    if errors:
        print(f"\n{errors} benchmark(s) FAILED (see 'error:' above)")
    if implausible:
        print(f"\n{implausible} figure(s) IMPLAUSIBLE (see above): the timing is to be checked")
    if not all_rows:
        n = len(report.get("benchmarks", []))
        print(f"gpu_summary.py: no rows: none of the {n} benchmark(s) in {path} is a GPU one "
              "(BM_device_... or BM_host_...)", file=sys.stderr)
    return 0 if all_rows and not errors and not implausible else 1


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0)
    args = sys.argv[1:]
    base = None
    if len(args) == 3 and args[0] == "--baseline":
        base, args = args[1], args[2:]
    if len(args) != 1 or args[0].startswith("--"):
        sys.exit(__doc__)
    sys.exit(main(args[0], base))
