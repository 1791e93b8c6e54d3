#!/usr/bin/env python3
"""kernel_busy.py: how much of each replayed training step the GPU spends in kernels, from a kernel trace.

Input: the CSV that bench/lab/kernel_trace (a CUPTI injection library) writes for a `trainbench train` run:
kind,start_ns,end_ns,correlation[,name] with kind kernel or graph_launch; a replayed graph's kernels carry its
cudaGraphLaunch's correlation id. Per replay: sum = the kernels' durations added up; busy = the union of their
intervals (kernels that overlap counted once); span = first kernel start to last kernel end; period = first kernel
start to the next replay's first kernel start (the step as the GPU sees it, host work between replays included).
The training issue's criterion: the step time with graph replay within 1% of the sum of kernel times (period / sum).
The first --skip replays (warm-up; default 2) are left out of the medians; the ratios are per replay, then their
median (the replays run at different clocks under a power limit, so a ratio of medians would mix them).
--by-op: each replay's kernel time by op (CATEGORIES: the first pattern found in the kernel's name), the median over
replays in ms and its share of the kernel sum: the op profile of the replayed steps at their own clock.

Usage: kernel_busy.py TRACE.csv [--skip 2] [--by-op]
"""
import argparse
import csv
import statistics
import sys
from collections import defaultdict

# op: substrings of a kernel's name (lower case), tried in this order: the gradient norm's kernels before the norms',
# and the FP8 kernels that compute what they cast (the cast tile kernel over a norm's, an activation's or the
# cross-entropy's source, whose type its name holds) under that op before "fp8 casts". The LM head's GEMMs count as
# GEMMs: this sorts kernels, not layers.
CATEGORIES = [
    ("grad norm + AdamW", ("adamw", "norm_partials", "norm_final", "clip_kernel", "step_consts")),
    ("attention", ("sdpa", "fmha", "flash", "cudnn", "attention")),
    ("cross-entropy", ("cross_entropy", "softmax", "xent")),
    ("activation", ("swiglu", "gelu", "sqrelu", "mapsource", "mapbackwardsource", "map_forward", "map_backward")),
    ("norm", ("norm",)),
    ("rope", ("rope",)),
    ("embedding", ("embedding", "position", "radix_sort")),  # cub's sort of the token ids
    ("initialisation", ("fill_",)),
    ("gemm", ("nvjet", "gemm", "xmma", "cutlass", "sm90_")),
    ("fp8 casts", ("cast", "fp8", "amax", "dequant")),
]


def category(name):
    low = name.lower()
    for op, keys in CATEGORIES:
        if any(k in low for k in keys):
            return op
    return "other"


def union_length(intervals):
    """Total length covered by [start, end) intervals, sorted by start."""
    total, cur_s, cur_e = 0, None, None
    for s, e in intervals:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def replays(rows):
    """[(first_start, last_end, kernels, sum, busy, {op: ns})] per graph launch with kernels, in launch order."""
    kernels = defaultdict(list)
    launches = []
    for kind, start, end, corr, name in rows:
        if kind == "kernel":
            kernels[corr].append((start, end, name))
        elif kind == "graph_launch":
            launches.append((start, corr))
    out = []
    for _, corr in sorted(launches):
        ks = sorted(kernels.get(corr, []))
        if ks:
            ops = defaultdict(int)
            for s, e, name in ks:
                ops[category(name)] += e - s
            spans = [(s, e) for s, e, _ in ks]
            out.append((ks[0][0], max(e for _, e in spans), len(ks), sum(e - s for s, e in spans),
                        union_length(spans), ops))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--by-op", action="store_true")
    a = ap.parse_args()
    with open(a.trace) as f:
        rows = [(r["kind"], int(r["start_ns"]), int(r["end_ns"]), int(r["correlation"]), r.get("name") or "")
                for r in csv.DictReader(f)]
    reps = replays(rows)
    if len(reps) < a.skip + 2:
        sys.exit(f"kernel_busy: {len(reps)} graph replays with kernels in {a.trace}; need at least {a.skip + 2}")
    print("replay  kernels   sum_ms  busy_ms  span_ms  period_ms  span/sum-1  period/sum-1")
    per = []
    for i, (first, last, n, total, busy, _) in enumerate(reps):
        span = last - first
        line = f"{i:6d}  {n:7d}  {total / 1e6:7.2f}  {busy / 1e6:7.2f}  {span / 1e6:7.2f}"
        if i + 1 < len(reps):
            period = reps[i + 1][0] - first
            line += f"  {period / 1e6:9.2f}  {span / total - 1:+10.4f}  {period / total - 1:+12.4f}"
            if i >= a.skip:
                per.append((total, busy, span, period, reps[i][5]))
        print(line)
    med = [statistics.median(p[k] for p in per) for k in range(4)]
    span_ratio = statistics.median(p[2] / p[0] - 1 for p in per)
    period_ratio = statistics.median(p[3] / p[0] - 1 for p in per)
    print(f"median of replays {a.skip}..{a.skip + len(per) - 1}: kernels {med[0] / 1e6:.2f} ms (busy "
          f"{med[1] / 1e6:.2f}), span {med[2] / 1e6:.2f}, period {med[3] / 1e6:.2f}; per replay, median span / kernel "
          f"sum - 1 = {span_ratio:+.2%}, period / kernel sum - 1 = {period_ratio:+.2%}")
    if a.by_op:
        total = statistics.median(p[0] for p in per)
        print(f"by op (median over the same replays; share of the median kernel sum {total / 1e6:.2f} ms):")
        for op in [c for c, _ in CATEGORIES] + ["other"]:
            ms = statistics.median(p[4].get(op, 0) for p in per)
            if ms:
                print(f"  {op:<26} {ms / 1e6:8.2f} ms  {ms / total:6.1%}")

if __name__ == "__main__":
    main()
