#!/usr/bin/env python3
"""Sums the kernel durations of an ncu CSV by kernel, per pass of the vision tower.

The CSV is what `ncu --metrics gpu__time_duration.sum --csv --print-units base`
prints for a run of `subtta bench` (scripts/gpu-run.sh's `profile` part). A
pass of the vision tower on the GPU runs the `patches` kernel once, so their
count is the number of passes; cuBLAS's and cuBLASLt's kernels (sgemm, xmma,
nvjet, cutlass, split-K reductions) are summed as "products". ncu runs the
kernels one at a time at base clocks: the sums exceed a timed pass, their
shares are what to read.

Usage: scripts/ncu_kernels.py [--passes N] FILE.csv [...]

--passes N gives the number of passes of the files after it, for a build
whose pass has no `patches` kernel (the patch embedding on the CPU).
"""
import csv
import re
import sys
from collections import defaultdict

PRODUCT = re.compile(r"gemm|xmma|nvjet|cutlass|splitKreduce", re.I)


def durations(path):
    """Yields (kernel name, microseconds) for each kernel launch in path."""
    with open(path, newline="") as f:
        rows = [line for line in f if line.startswith('"')]
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        scale = {"ns": 1e-3, "nsecond": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit)
        if scale is None:
            raise SystemExit(f"{path}: unknown unit {unit!r}")
        yield r["Kernel Name"], v * scale


def summary(path, passes_given=0):
    total, count = defaultdict(float), defaultdict(int)
    passes = 0
    for name, us in durations(path):
        group = "products (cuBLAS, cuBLASLt)" if PRODUCT.search(name) else name
        total[group] += us
        count[group] += 1
        passes += name == "patches"
    if not total:
        raise SystemExit(f"{path}: no gpu__time_duration.sum rows")
    all_us = sum(total.values())
    how = "patches"
    if passes_given:
        passes, how = passes_given, "given"
    per = max(passes, 1)
    print(f"{path}: {sum(count.values())} kernels, {all_us / 1e3:.1f} ms; {passes} passes ({how}), "
          f"{sum(count.values()) / per:.0f} kernels and {all_us / per / 1e3:.2f} ms a pass")
    for group, us in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"  {group[:48]:<48} {count[group] / per:7.1f} a pass {us / per:10.1f} µs a pass {100 * us / all_us:5.1f}%")


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    args, passes = sys.argv[1:], 0
    while args:
        if args[0] == "--passes":
            if len(args) < 2 or not args[1].isdigit():
                raise SystemExit("--passes needs a number")
            passes, args = int(args[1]), args[2:]
            continue
        summary(args[0], passes)
        args = args[1:]


if __name__ == "__main__":
    main()
