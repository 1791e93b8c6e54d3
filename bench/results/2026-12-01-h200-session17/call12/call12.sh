# Session 17, call 12, after the review (one fp8_w(i) for the FP8 weight copies' address instead of four spellings;
# the attention emulation's bits from the validated values): decoder_cuda (FP8 paths against the fp64 CPU reference)
# and trainer_cuda's FP8 tests (fused copies bit for bit the cast, auto, the emulation).
set -u
source bench/gpu_env.sh
carry/tests/decoder_cuda_gpu_test --gtest_brief=1 2>&1 | tail -2
carry/tests/trainer_cuda_gpu_test --gtest_filter='*Fp8*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|expected|Which|small-hd128" | head
