#!/usr/bin/env python3
"""train_ratios.py: trainbench's training runs against the PyTorch peers of the same run, as ratios.

Inputs: OUT, a folder as bench/train_acceptance.sh leaves it: OUT/results/NAME/results.jsonl (`trainbench train`
records, bench "train") and OUT/peers.jsonl (one bench/peers/torch_train.py record per line). Runs and peers are
matched by shape (model, layers, seq, micro-batch, global batch). Per shape, every run and peer with its step time,
tokens/s, peak memory, energy per token and mean SM clock, then each trainbench run against each peer state, and
every other configuration (FP8, recompute, other optimizer state) against trainbench's default at its shape:
  speed = tokens/s / the peer's (its runs' mean; above 1: trainbench faster), or / the default run's
  memory = peak allocated / the peer's (below 1: trainbench smaller), or / the default run's
Where a shape has a target of the training engine for trainbench's default (BF16, fp32 master weights, moments
and gradients, no recompute) against the bf16-state peer (8B L8 >= 1.10, 70B L2 >= 1.05, seq 8192, micro-batch 1,
global batch 1) and for its memory against the fp32-state peer (8B L8 <= 1), the row says whether it is met, and the
last line counts them. Exit 0 whether or not they are met (a report); 1 without trainbench records.

Usage: train_ratios.py OUT
"""
import argparse
import glob
import json
import os
import statistics
import sys

from train_records import normalized, train_record

# (model, layers, seq, micro-batch, global batch) -> (speed vs the bf16-state peer, memory vs the fp32-state peer)
TARGETS = {("llama3.1-8b", 8, 8192, 1, 1): (1.10, 1.0), ("llama3.1-70b", 2, 8192, 1, 1): (1.05, None)}


def shape(r):
    return (r.get("model"), r.get("layers"), r.get("seq"), r.get("micro_batch"), r.get("global_batch"))


def ours(out):
    """[(name, record)] of the trainbench train runs under out/results that ended ok, by folder name."""
    runs = []
    for folder in sorted(glob.glob(os.path.join(out, "results", "*"))):
        r = train_record(folder)
        if r and r.get("status", "ok") == "ok":
            runs.append((os.path.basename(folder), r))
    return runs


def peers(out):
    path = os.path.join(out, "peers.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [normalized(json.loads(line)) for line in f if line.strip()]


def is_default(r):
    return (r.get("precision") == "bf16" and r.get("moments", "f32") == "f32" and r.get("grads", "f32") == "f32" and
            r.get("recompute", "none") == "none" and r.get("master", "split") == "split")


def fmt(x, width, digits):  # "-" for what was not measured (trainbench writes 0 for energy without NVML)
    return f"{x:{width}.{digits}f}" if isinstance(x, (int, float)) and x > 0 else f"{'-':>{width}}"


def row(name, step_ms, tps, gib, jpt, mhz):
    return (f"  {name:<32} {fmt(step_ms, 9, 1)} {fmt(tps, 10, 0)} {fmt(gib, 9, 2)} {fmt(jpt, 9, 4)} "
            f"{fmt(mhz, 7, 0)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    a = ap.parse_args()
    runs, ps = ours(a.out), peers(a.out)
    if not runs:
        sys.exit(f"train_ratios: no trainbench train records under {a.out}/results")
    met = unmet = 0
    for key in sorted({shape(r) for _, r in runs}, key=str):
        mine = [(n, r) for n, r in runs if shape(r) == key]
        theirs = {}
        for p in ps:
            if shape(p) == key:
                theirs.setdefault(p.get("state"), []).append(p)
        model, layers, seq, mb, gb = key
        print(f"\n{model} L{layers} seq {seq} micro-batch {mb} global batch {gb}")
        print(f"  {'run':<32} {'step ms':>9} {'tokens/s':>10} {'peak GiB':>9} {'J/token':>9} {'SM MHz':>7}")
        for n, r in mine:
            tel = r.get("telemetry") or {}
            print(row(n, (r.get("step_ms") or {}).get("median"), r.get("tokens_per_s"), r.get("peak_alloc_gib"),
                      r.get("energy_j_per_token"), tel.get("sm_clock_mhz_mean")))
        for state, group in sorted(theirs.items()):
            for i, p in enumerate(group):
                tel = p.get("telemetry") or {}
                print(row(f"torch {state} state" + (f" #{i + 1}" if len(group) > 1 else ""),
                          p["step_ms"]["median"], p.get("tokens_per_s"), p.get("max_memory_allocated_gib"),
                          p.get("energy_j_per_token"), tel.get("sm_clock_mhz_mean")))
        if not theirs:
            print("  (no peer at this shape)")
        base = [r for _, r in mine if is_default(r)]  # trainbench's default at this shape: the others' baseline
        target = TARGETS.get(key)
        for n, r in mine:
            parts = []
            if base and not is_default(r):
                parts.append(f"vs trainbench's default: speed {r['tokens_per_s'] / base[0]['tokens_per_s']:.3f}, "
                             f"memory {r['peak_alloc_gib'] / base[0]['peak_alloc_gib']:.3f}")
            for state, group in sorted(theirs.items()):
                tps = statistics.mean(p["tokens_per_s"] for p in group)
                mem = statistics.mean(p["max_memory_allocated_gib"] for p in group)
                text = f"vs torch {state}: speed {r['tokens_per_s'] / tps:.3f}, memory {r['peak_alloc_gib'] / mem:.3f}"
                if target and is_default(r):
                    if state == "bf16":
                        ok = r["tokens_per_s"] / tps >= target[0]
                        text += f" (target speed >= {target[0]:.2f}: {'met' if ok else 'not met'})"
                        met, unmet = met + ok, unmet + (not ok)
                    if state == "fp32" and target[1] is not None:
                        ok = r["peak_alloc_gib"] / mem <= target[1]
                        text += f" (target memory <= {target[1]:.2f}: {'met' if ok else 'not met'})"
                        met, unmet = met + ok, unmet + (not ok)
                parts.append(text)
            if not parts:
                continue
            print(f"  {n}: " + "; ".join(parts))
    if met + unmet:
        print(f"\ntraining-engine targets: {met} met, {unmet} not met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
