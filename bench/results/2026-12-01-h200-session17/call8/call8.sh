# Session 17, call 8: the FP8-copy kernel with two rows' loads in flight per thread (their arithmetic and stores after
# both; 4 blocks per SM, no spills in the bf16-moment variant, 4 bytes in the fp32 one). Call 4 (one row per pass, 5
# blocks): fp32 moments 13.11 ms, bf16 11.61 against plain AdamW 12.06 / 8.86 (84% of the plain rate in bf16).
# Predicted: bytes in flight per SM 1.6x (bf16: 61 -> 98 KB), bf16 near the plain rate (~9.8 ms), fp32 unchanged or
# a little better. Same lab binary shape as call 4 (adamw_lab 1745: [426016, 4096]); then the 8B L8 step separate /
# fused with both moment types (op profiles) and the tests of the copies.
set -u
source bench/gpu_env.sh
carry/adamw_lab 1745
dh="--model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-recipe delayed --fp8-lm-head --steps 25 --warmup-steps 5"
for mom in f32 bf16; do for c in separate fused; do
  carry/trainbench train $dh --moments $mom --fp8-weight-cast $c 2>&1 | grep -E "^summary|fp8 weight casts|grad norm \+ AdamW" | sed "s/^/$mom $c: /"
done; done
carry/tests/adamw_gpu_test 2>&1 | grep -E "^\[  (PASSED|FAILED) |Failure|Expected|Which" | head -20
carry/tests/trainer_cuda_gpu_test --gtest_filter='*Fp8Weight*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|expected|Which" | head
