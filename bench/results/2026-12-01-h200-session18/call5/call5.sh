# Session 18, call 5: does AdamW writing the FP8 weight copies pay with bf16 gradients and bf16 moments (the fastest
# row; `auto` casts apart with bf16 moments since session 17, where fused was +0.16 ms)? Alternating pairs of
# --fp8-weight-cast fused / separate on that row. Then the whole trainer_cuda GPU suite (regressions), adamw.
set -u
source bench/gpu_env.sh
s8="--model llama3.1-8b --layers 8 --seq 8192"
best="--precision fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention --moments bf16 --grads bf16"
for i in 1 2; do
  for cast in fused separate; do
    echo "### $cast $i"
    carry/trainbench train $s8 $best --fp8-weight-cast $cast --steps 25 --warmup-steps 5 --no-op-profile \
      --out "$OUT/results/$cast-$i" > "$OUT/$cast-$i.log" 2>&1; echo "exit $?"; grep -E "^summary" "$OUT/$cast-$i.log"
  done
done
echo "## adamw"; carry/tests/adamw_gpu_test --gtest_brief=1 2>&1 | tail -2
echo "## trainer_cuda"
carry/tests/trainer_cuda_gpu_test 2>&1 | grep -E "^\[  (PASSED|FAILED) |Failure|expected|Which|final loss|peak" | head -30
