#!/usr/bin/env bash
# call 6: the session's final build: every GPU test binary, `train --autotune` (its new progress line) on `small`,
# and the README's main job is left to the recipes' calls (unchanged code paths).
set -u
for t in carry/tests/*_gpu_test; do
  echo "-- $(basename $t): $($t --gtest_brief=1 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) ' | tr '\n' ' ')"
done
carry/trainbench train --model small --autotune --steps 6 --warmup-steps 2 --no-op-profile --out $OUT/tune 2>&1 \
  | grep -E "autotune|^summary|GEMM shapes"
