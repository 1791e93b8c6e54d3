# Session 16, call 7: lm_head_fp8_gpu_test after the review (its two tests' fp64 reference head now one helper).
set -u
source bench/gpu_env.sh
carry/tests/lm_head_fp8_gpu_test --gtest_brief=1 > "$OUT/tests.log" 2>&1 || echo "FAILED: lm_head_fp8" >> "$OUT/tests.log"
cat "$OUT/tests.log"
