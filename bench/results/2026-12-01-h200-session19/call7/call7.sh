# Session 19, call 7, after the review: the transposed tile store as one helper (ops/cuda/fp8_cast.cuh
# store_tile_column, used by the production kernel and the lab's variants; the lab now clears q and qt before each
# part): cast_lab's variants bit for bit against fp8_cast, and the GPU tests of the kernels that run the tile kernel.
set -u
source bench/gpu_env.sh
carry/cast_lab 8192x4096 128256x4096 | grep -E 'shape|fp8_cast|V<64,64,8>|only|amax|DIFFERS'
carry/cast_lab 8192x4096 128256x4096 | grep -c 'bit for bit'
for t in fp8 cuda_elementwise adamw lm_head_fp8; do
  echo "## $t"; carry/tests/${t}_gpu_test --gtest_brief=1 2>&1 | grep -E "FAILED|Failure|PASSED|expected|Which" | head -20
done
echo "## trainer_cuda (FP8)"
carry/tests/trainer_cuda_gpu_test --gtest_brief=1 --gtest_filter='*Fp8*' 2>&1 | grep -E "FAILED|Failure|PASSED|final" | head
