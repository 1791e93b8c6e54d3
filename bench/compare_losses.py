#!/usr/bin/env python3
"""compare_losses.py: the per-step losses of two `trainbench train` results folders, side by side.

Usage: compare_losses.py REFERENCE CANDIDATE [--tol 0.02]
Prints both loss curves and the largest relative difference; exits 1 when it is above --tol (a parallel layout
must train like the single-GPU run: equal within bf16 round-off that grows slowly over the steps)."""
import argparse
import sys

from train_records import train_record


def losses(folder):
    r = train_record(folder)
    if not r:
        sys.exit(f"no train record in {folder}")
    return r["loss"], r.get("tokens_per_s_per_gpu", r["tokens_per_s"])


ap = argparse.ArgumentParser()
ap.add_argument("reference")
ap.add_argument("candidate")
ap.add_argument("--tol", type=float, default=0.02)
a = ap.parse_args()
ref, ref_tps = losses(a.reference)
cand, cand_tps = losses(a.candidate)
if len(ref) != len(cand):
    sys.exit(f"step counts differ: {len(ref)} vs {len(cand)}")
worst = 0.0
for i, (x, y) in enumerate(zip(ref, cand), 1):
    rel = abs(x - y) / abs(x)
    worst = max(worst, rel)
    print(f"step {i:3d}  {x:.5f}  {y:.5f}  rel {rel:.2e}")
print(f"max relative loss difference {worst:.2e} (tolerance {a.tol:g}); tokens/s per GPU {ref_tps:.0f} vs {cand_tps:.0f} "
      f"= {cand_tps / ref_tps:.3f}")
sys.exit(0 if worst <= a.tol else 1)
