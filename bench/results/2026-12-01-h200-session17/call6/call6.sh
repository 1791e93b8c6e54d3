# Session 17, call 6: the FP8-copy kernel with 4 tiles of 32 x 128 per block where the rows allow (its start, the
# scale and constants reads and the amax record paid once per 4 tiles; 20-24 bytes of register spills). adamw_lab at
# 1745 M weights times both tile counts in one binary (rows a multiple of 128: 4 tiles; 32 rows fewer: 1). Predicted:
# the bf16-moment variant (call 4: 84% of the plain update's rate) gains most, fp32 (99%) little. Then the 8B L8 step
# separate / fused with fp32 and bf16 moments (op profiles), and the tests of the copies.
set -u
source bench/gpu_env.sh
carry/adamw_lab 1745
dh="--model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-recipe delayed --fp8-lm-head --steps 25 --warmup-steps 5"
for mom in f32 bf16; do for c in separate fused; do
  carry/trainbench train $dh --moments $mom --fp8-weight-cast $c 2>&1 | grep -E "^summary|fp8 weight casts|grad norm \+ AdamW" | sed "s/^/$mom $c: /"
done; done
carry/tests/adamw_gpu_test --gtest_brief=1 2>&1 | tail -3
carry/tests/trainer_cuda_gpu_test --gtest_filter='*Fp8*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|expected|Which" | head
