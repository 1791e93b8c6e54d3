#!/usr/bin/env python3
"""lora_ratios.py: one run of bench/lora_acceptance.sh against others of the same run, as ratios.

A name is a trainbench run (OUT/results/NAME, its `train` record) or a peer's (OUT/peer-NAME.json, the JSON line of
bench/peers/torch_lora.py, hf_lora.py or torch_train.py). For NAME and each OTHER: step time, tokens/s, TFLOP/s (each
record's own count: 2/3 of the `full` convention with LoRA) and peak allocated memory, then per OTHER
  speed  = tokens/s of NAME / tokens/s of OTHER   (above 1: NAME faster)
  memory = peak allocated of NAME / OTHER's        (below 1: NAME smaller)
A name without a record is reported as missing. Exit 0 (a report); 1 when NAME has no record.

Usage: lora_ratios.py OUT NAME OTHER...
"""
import argparse
import json
import os
import sys

from train_records import normalized, train_record


def load(out, name):
    """(who, record) of name under out, or (None, None)."""
    folder = os.path.join(out, "results", name)
    if os.path.isdir(folder):
        r = train_record(folder)
        return ("trainbench", r) if r else (None, None)
    path = os.path.join(out, f"peer-{name}.json")
    try:
        with open(path) as f:
            r = normalized(json.loads(f.readline()))
        return r.get("peer", "peer"), r
    except (OSError, ValueError):
        return None, None


def peak_gib(r):
    return r.get("peak_alloc_gib", r.get("max_memory_allocated_gib"))


def fmt(x, width, digits):
    return f"{x:{width}.{digits}f}" if isinstance(x, (int, float)) and x > 0 else f"{'-':>{width}}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("name")
    ap.add_argument("others", nargs="+")
    a = ap.parse_args()
    who, mine = load(a.out, a.name)
    if mine is None:
        print(f"lora_ratios: no record of {a.name} under {a.out}")
        return 1
    print(f"  {'run':<36} {'step ms':>9} {'tokens/s':>10} {'TFLOP/s':>8} {'peak GiB':>9}")
    rows = [(a.name, who, mine)] + [(n, *load(a.out, n)) for n in a.others]
    for n, w, r in rows:
        if r is None:
            print(f"  {n:<36} (no record)")
            continue
        print(f"  {f'{n} ({w})':<36} {fmt((r.get('step_ms') or {}).get('median'), 9, 1)} "
              f"{fmt(r.get('tokens_per_s'), 10, 0)} {fmt(r.get('tflops'), 8, 1)} {fmt(peak_gib(r), 9, 2)}")
    for n, w, r in rows[1:]:
        if r is None:
            continue
        mem = peak_gib(mine) / peak_gib(r) if peak_gib(mine) and peak_gib(r) else None
        print(f"  {a.name} / {n}: speed {mine['tokens_per_s'] / r['tokens_per_s']:.3f}, memory "
              f"{fmt(mem, 0, 3).strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
