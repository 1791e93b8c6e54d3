# Session 18, call 8, after the review (one float/bf16 type dispatch, ops/cuda/gemm.h with_float_type, for AdamW and
# the decoder's gradients; a test helper): adamw, the bf16-gradient kernel tests, decoder_cuda, trainer_cuda's
# bf16-gradient and FP8 weight-copy tests.
set -u
source bench/gpu_env.sh
carry/tests/adamw_gpu_test --gtest_brief=1 2>&1 | tail -2
carry/tests/cuda_elementwise_gpu_test --gtest_filter='*Bf16*' --gtest_brief=1 2>&1 | tail -2
carry/tests/decoder_cuda_gpu_test --gtest_brief=1 2>&1 | tail -2
carry/tests/trainer_cuda_gpu_test --gtest_filter='*Bf16Gradients*:*Fp8WeightCopies*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|final|peak" | head
