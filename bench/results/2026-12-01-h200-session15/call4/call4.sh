# Session 15, call 4: the final build (--fp8-lm-head-grad defaulting to the format's gradients, the run header naming
# the FP8 options): the GPU tests of the trainer, the decoder, the FP8 head and the cross-entropy; one 8B L8 step run
# with the FP8 head to show the header and the results' fp8 record.
set -u
source bench/gpu_env.sh
for t in trainer_cuda decoder_cuda lm_head_fp8 cross_entropy; do
  echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 2>&1 | grep -E "final loss|PASSED|FAILED|^\[  SKIPPED" || echo "FAILED: $t"
done
carry/trainbench train --model llama3.1-8b --layers 8 --seq 8192 --steps 8 --warmup-steps 3 --precision fp8 \
  --fp8-recipe delayed --fp8-lm-head --no-op-profile --out "$OUT/r" | grep -E "^train|^summary"
grep -o '"fp8":{[^}]*}' "$OUT/r/results.jsonl" | head -1
rm -rf "$OUT/r"
