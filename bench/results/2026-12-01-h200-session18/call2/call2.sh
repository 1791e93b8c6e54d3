# Session 18, call 2: call 1 failed two new tests on their own tolerances (an embedding token across chunks and the LM
# head's two-chunk accumulation round a partial sum that can exceed the final one; the bound is now half an ulp of the
# largest sum); run again. Then `bench/train_acceptance.sh grads`: fp32 vs bf16 gradients at 8B L8 (BF16, BF16 with
# bf16 moments, FP8 delayed + head, + FP8 attention with bf16 moments) and 70B L2, and the torch BF16 peer.
# Prediction from call 1 (-4.2 ms BF16, -4.9 ms FP8 at 8B L8): the fastest row 150.7 -> ~146 ms.
set -u
source bench/gpu_env.sh
for t in cuda_elementwise lm_head_fp8; do
  echo "## $t"; carry/tests/${t}_gpu_test --gtest_filter='*Bf16*' 2>&1 | grep -E "FAILED|Failure|PASSED|expected|Which|of " | head -20
done
bench/train_acceptance.sh grads > /dev/null
grep -E "^### |^summary|memory: peak|^torch|gemm wgrad|grad norm \+ AdamW" "$OUT/train.log" | head -80
