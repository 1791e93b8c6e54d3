#!/usr/bin/env python3
"""kernel_busy.py: how much of each replayed training step the GPU spends in kernels, from a kernel trace.

Input: the CSV that bench/lab/kernel_trace (a CUPTI injection library) writes for a `trainbench train` run:
kind,start_ns,end_ns,correlation[,name] with kind kernel or graph_launch; a replayed graph's kernels carry its
cudaGraphLaunch's correlation id. Per replay: sum = the kernels' durations added up; busy = the union of their
intervals (kernels that overlap counted once); span = first kernel start to last kernel end; period = first kernel
start to the next replay's first kernel start (the step as the GPU sees it, host work between replays included).
The training engine's criterion: the step time with graph replay within 1% of the sum of kernel times (period / sum).
The first --skip replays (warm-up; default 2) are left out of the medians; the ratios are per replay, then their
median (the replays run at different clocks under a power limit, so a ratio of medians would mix them).
--by-op: each replay's kernel time by op (CATEGORIES: the first pattern found in the kernel's name), the median over
replays in ms and its share of the kernel sum: the op profile of the replayed steps at their own clock.
--eager STEPS --step-ms MS: a trace without graph replays (an eager program such as the torch peer, whose step time
MS is known from its own log): the kernels that start in the trace's last STEPS x MS milliseconds, their time by op
per step (sum / STEPS) and busy / window. --top K (either mode): the K kernel names with the most time per step.

Usage: kernel_busy.py TRACE.csv[.gz] [--skip 2] [--by-op] [--top K] [--eager STEPS --step-ms MS]
"""
import argparse
import csv
import gzip
import statistics
import sys
from collections import defaultdict

# op: substrings of a kernel's name (lower case), tried in this order: the gradient norm's kernels before the norms',
# and the FP8 kernels that compute what they cast (the cast tile kernel over a norm's, an activation's or the
# cross-entropy's source, whose type its name holds) under that op before "fp8 casts". The LM head's GEMMs count as
# GEMMs: this sorts kernels, not layers. The torch peer's names are covered too where they say what they are (its fused
# AdamW, the clipping's foreach norm and multiply, Triton's silu and rms_norm fusions).
CATEGORIES = [
    ("grad norm + AdamW", ("adam", "norm_partials", "norm_final", "clip_kernel", "step_consts", "lpnorm",
                           "foreachbinaryop")),
    ("attention", ("sdpa", "fmha", "flash", "cudnn", "attention")),
    ("cross-entropy", ("cross_entropy", "softmax", "xent")),
    ("activation", ("swiglu", "silu", "gelu", "sqrelu", "mapsource", "mapbackwardsource", "map_forward",
                    "map_backward")),
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
    """[(first_start, last_end, kernels, sum, busy, {op: ns}, {name: [ns, calls]})] per graph launch with kernels, in
    launch order."""
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
            ops, names = defaultdict(int), defaultdict(lambda: [0, 0])
            for s, e, name in ks:
                ops[category(name)] += e - s
                names[name][0] += e - s
                names[name][1] += 1
            spans = [(s, e) for s, e, _ in ks]
            out.append((ks[0][0], max(e for _, e in spans), len(ks), sum(e - s for s, e in spans),
                        union_length(spans), ops, names))
    return out


def print_ops(ns_by_op, total_ns):
    """Each op's time (ns in, ms out) and its share of total_ns, in CATEGORIES' order, the ops without time left out."""
    for op in [c for c, _ in CATEGORIES] + ["other"]:
        if ns_by_op.get(op):
            print(f"  {op:<26} {ns_by_op[op] / 1e6:8.2f} ms  {ns_by_op[op] / total_ns:6.1%}")


def print_top(per_name, steps, k):
    """The k kernel names with the most time, in ms per step."""
    print(f"top {k} kernels (ms per step, calls per step):")
    for name, (ns, calls) in sorted(per_name.items(), key=lambda kv: -kv[1][0])[:k]:
        print(f"  {ns / 1e6 / steps:8.2f}  {calls / steps:6.1f}  {name[:110]}")


def eager(rows, steps, step_ms, top):
    """The last steps x step_ms of an eager trace: kernel time by op per step, and the busy fraction."""
    ks = sorted((s, e, name) for kind, s, e, _, name in rows if kind == "kernel")
    if not ks:
        sys.exit("kernel_busy: no kernels in the trace")
    end = max(e for _, e, _ in ks)
    start = end - steps * step_ms * 1e6
    ks = [k for k in ks if k[0] >= start]
    ops, per_name = defaultdict(int), defaultdict(lambda: [0, 0])
    for s, e, name in ks:
        ops[category(name)] += e - s
        per_name[name][0] += e - s
        per_name[name][1] += 1
    total = sum(ops.values())
    busy = union_length([(s, e) for s, e, _ in ks])
    print(f"last {steps} steps of {step_ms:.2f} ms: {len(ks) / steps:.0f} kernels per step, kernel sum "
          f"{total / 1e6 / steps:.2f} ms per step, busy {busy / (end - start):.1%} of the window")
    print_ops({op: ns / steps for op, ns in ops.items()}, total / steps)
    if top:
        print_top(per_name, steps, top)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--by-op", action="store_true")
    ap.add_argument("--top", type=int, default=0, help="list the K kernel names with the most time per step")
    ap.add_argument("--eager", type=int, default=0, metavar="STEPS", help="an eager trace: its last STEPS steps")
    ap.add_argument("--step-ms", type=float, default=0, help="with --eager: the program's step time")
    a = ap.parse_args()
    with (gzip.open(a.trace, "rt") if a.trace.endswith(".gz") else open(a.trace)) as f:
        rows = [(r["kind"], int(r["start_ns"]), int(r["end_ns"]), int(r["correlation"]), r.get("name") or "")
                for r in csv.DictReader(f)]
    if a.eager:
        if a.step_ms <= 0:
            sys.exit("kernel_busy: --eager needs --step-ms (the program's step time, from its log)")
        return eager(rows, a.eager, a.step_ms, a.top)
    reps = replays(rows)
    if len(reps) < a.skip + 2:
        sys.exit(f"kernel_busy: {len(reps)} graph replays with kernels in {a.trace}; need at least {a.skip + 2}")
    print("replay  kernels   sum_ms  busy_ms  span_ms  period_ms  span/sum-1  period/sum-1")
    per = []
    for i, (first, last, n, total, busy, _, _) in enumerate(reps):
        span = last - first
        line = f"{i:6d}  {n:7d}  {total / 1e6:7.2f}  {busy / 1e6:7.2f}  {span / 1e6:7.2f}"
        if i + 1 < len(reps):
            period = reps[i + 1][0] - first
            line += f"  {period / 1e6:9.2f}  {span / total - 1:+10.4f}  {period / total - 1:+12.4f}"
            if i >= a.skip:
                per.append((total, busy, span, period, reps[i][5], reps[i][6]))
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
        print_ops({op: statistics.median(p[4].get(op, 0) for p in per) for op, _ in CATEGORIES + [("other", ())]},
                  total)
    if a.top:
        per_name = defaultdict(lambda: [0, 0])
        for p in per:
            for name, (ns, calls) in p[5].items():
                per_name[name][0] += ns
                per_name[name][1] += calls
        print_top(per_name, len(per), a.top)

if __name__ == "__main__":
    main()
