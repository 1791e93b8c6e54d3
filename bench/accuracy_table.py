#!/usr/bin/env python3
"""accuracy_table.py: the FP8 accuracy criterion over the runs of bench/train_acceptance.sh's accuracy modes.

Each run's folder is RESULTS/TAG-sSEED-DATA-PRECISION (one `trainbench train` JSONL record with every step's loss;
accuracy_runs.py reads them). Per run: the final loss = the mean of the last --last steps' losses (one step's loss is
one batch: noisy). Per (data, seed): each precision's final loss relative to the BF16 run of the same seed, d = final
/ final_bf16 - 1; the FP8 accuracy criterion is |d| <= --tol for every seed. Prints one table per data set, with
the mean and sample standard deviation of d over the seeds (a shift common to all seeds, against the spread of the
runs) and on how many seeds a precision misses the bound, and exits 1 when a run is missing or a precision misses the
bound on some seed. --against compares with another precision of the same seed instead of BF16 (what an option adds,
e.g. --against "fp8 --fp8-recipe delayed" for the FP8 LM head's cost over the FP8 linear layers alone).

Usage: accuracy_table.py RESULTS [--tag acc] [--last 50] [--tol 0.015] [--against bf16]"""
import argparse
import statistics
import sys

import accuracy_runs

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("results")
ap.add_argument("--tag", default="acc")
ap.add_argument("--last", type=int, default=50)
ap.add_argument("--tol", type=float, default=0.015)
ap.add_argument("--against", default="bf16", help="the precision compared with (spaces or underscores)")
a = ap.parse_args()
ref_p = a.against.replace(" ", "_")

runs = {k: sum(v[-a.last:]) / a.last for k, v in accuracy_runs.load(a.results, a.tag, a.last).items()}

failed = False
for data in sorted({d for d, _, _ in runs}):
    seeds, precisions = accuracy_runs.seeds_and_precisions(runs, data)
    if ref_p not in precisions:
        sys.exit(f"{data}: no runs of --against '{a.against}'; the precisions are: {', '.join(precisions)}")
    against = "BF16" if ref_p == "bf16" else ref_p.replace("_", " ")
    print(f"\n{data}: mean loss of the last {a.last} steps; in brackets the difference to {against} of the same seed")
    print("| precision | " + " | ".join(f"seed {s}" for s in seeds) + " | mean (sd) | largest difference |")
    print("|---" * (len(seeds) + 3) + "|")
    for p in precisions:
        cells, diffs = [], []
        for s in seeds:
            if (data, s, p) not in runs or (data, s, ref_p) not in runs:
                cells.append("missing")
                failed = True
                continue
            v, ref = runs[(data, s, p)], runs[(data, s, ref_p)]
            d = v / ref - 1
            diffs.append(d)
            cells.append(f"{v:.4f}" if p == ref_p else f"{v:.4f} ({d:+.2%})")
        worst = max((abs(d) for d in diffs), default=0.0)
        ok = p == ref_p or worst <= a.tol
        failed |= not ok
        shift = "" if p == ref_p or not diffs else f"{statistics.mean(diffs):+.2%}"
        if shift and len(diffs) > 1:
            shift += f" ({statistics.stdev(diffs):.2%})"
        over = sum(abs(d) > a.tol for d in diffs)
        verdict = "" if p == ref_p else (f"{worst:.2%}: within {a.tol:.1%} on every seed" if ok else
                                          f"{worst:.2%}: OVER {a.tol:.1%} on {over} of {len(diffs)} seeds")
        print(f"| {p.replace('_', ' ')} | " + " | ".join(cells) + f" | {shift} | {verdict} |")
sys.exit(1 if failed else 0)
