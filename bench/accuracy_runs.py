"""accuracy_runs.py: the runs of bench/train_acceptance.sh's accuracy modes, for accuracy_table.py and
accuracy_curves.py.

A run's folder is RESULTS/TAG-sSEED-DATA-PRECISION and holds one `trainbench train` JSONL record (bench "train")
with every step's loss. load() returns {(data, seed, precision): [loss per step]}, precision as in the folder name
(spaces written as underscores); it exits with a message when a run has fewer than min_losses losses or when no
folder matches. seeds_and_precisions() orders one data set's seeds and precisions (BF16 first)."""
import glob
import os
import re
import sys

from train_records import train_record


def load(results, tag, min_losses=1):
    pattern = re.compile(rf"^{re.escape(tag)}-s(\d+)-(.+?)-((?:bf16|fp8).*)$")
    runs = {}
    for folder in sorted(glob.glob(os.path.join(results, f"{tag}-s*"))):
        m = pattern.match(os.path.basename(folder))
        if not m:
            continue
        r = train_record(folder)
        losses = r["loss"] if r else None
        if not losses or len(losses) < min_losses:
            sys.exit(f"{folder}: no train record with at least {min_losses} losses")
        runs[(m[2], int(m[1]), m[3])] = losses
    if not runs:
        sys.exit(f"no runs named {tag}-sSEED-DATA-PRECISION under {results}")
    return runs


def seeds_and_precisions(runs, data):
    seeds = sorted({s for d, s, _ in runs if d == data})
    return seeds, ["bf16"] + sorted({p for d, _, p in runs if d == data and p != "bf16"})
