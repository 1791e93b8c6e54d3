# Session 16, call 6: the final build's GPU tests of what changed (trainer_cuda now runs the FP8 head rounding to
# nearest explicitly and stochastically by default), and the run header and record of a default FP8 head.
set -u
source bench/gpu_env.sh
for t in fp8 lm_head_fp8 decoder_cuda trainer_cuda; do
  echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 || echo "FAILED: $t"
done > "$OUT/tests.log" 2>&1
grep -E "^-- |tests? from .* ran|PASSED|FAILED|final loss" "$OUT/tests.log"
carry/trainbench train --model small --steps 20 --precision fp8 --fp8-recipe delayed --fp8-lm-head --no-op-profile \
  --out "$OUT/smoke" > "$OUT/smoke.log" 2>&1; echo "exit $?"
grep -E "^train |loss" "$OUT/smoke.log"
grep -o '"fp8":{[^}]*}' "$OUT"/smoke/*.jsonl | head -1
