# Session 16, call 9: after the review of sessions 14-16's change, the LM head's GPU tests: the bf16 head and the FP8
# head's BF16 GEMMs now call one set of GEMM shapes (ops/cuda/cross_entropy.cu Bf16HeadGemms); the head test's bf16
# read-back in one helper.
set -u
source bench/gpu_env.sh
for t in lm_head_fp8 cross_entropy; do
  echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 || echo "FAILED: $t"
done > "$OUT/tests.log" 2>&1
grep -E "^-- |tests? from .* ran|PASSED|FAILED" "$OUT/tests.log"
