# Session 18, call 9, after the second review (dtype_of<T>() moved to core/dtype.h; the GEMM shapes of the bf16
# gradients take it from there): lm_head_fp8, decoder_cuda, trainer_cuda's bf16-gradient test.
set -u
source bench/gpu_env.sh
carry/tests/lm_head_fp8_gpu_test --gtest_brief=1 2>&1 | tail -2
carry/tests/decoder_cuda_gpu_test --gtest_brief=1 2>&1 | tail -2
carry/tests/trainer_cuda_gpu_test --gtest_filter='*Bf16Gradients*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|final|peak" | head
