# Session 17, call 2: call 1 found AdamW's FP8 copies through the cast's 64 x 64 tiles slower than the step and cast
# apart (grad norm + AdamW 22.6 -> 27.4 ms, weight casts 3.5 -> 1.0: +2.4 ms at 8B L8). Now a kernel of its own
# (ops/cuda/adamw.cu adamw_fp8_copy_kernel: 32 x 128 tiles, each warp access one contiguous run as in adamw_kernel).
# Predicted again: -1.0 to -1.5 ms per step. Same tests and `bench/train_acceptance.sh fp8fused` as call 1.
set -u
source bench/gpu_env.sh
for t in adamw fp8; do carry/tests/${t}_gpu_test 2>&1 | grep -E "FAILED|Failure|PASSED|expected|Which" | head -20; done
carry/tests/trainer_cuda_gpu_test --gtest_filter='*Fp8Weight*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|expected|Which" | head -20
bench/train_acceptance.sh fp8fused > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-speed.tgz"; mv "$OUT/train.log" "$OUT/speed.log"
grep -E "^### |^train |^summary|memory: peak|^torch|fp8 weight casts|grad norm \+ AdamW" "$OUT/speed.log" | grep -v "^train " | head -80
