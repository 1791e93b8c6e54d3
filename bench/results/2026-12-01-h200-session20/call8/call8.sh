# Session 20, call 8, after the review (the sources' values() lost their unused row argument; comments): the GPU
# tests of every kernel on the cast kernels, cast_lab, and the fastest FP8 row once: its losses must hash as in calls
# 1, 4 and 5 (0e5cc2d909ac: the HEAD build's, bit for bit).
set -u
source bench/gpu_env.sh
python3 -c "import tarfile; tarfile.open('carry/bins.tar.xz').extractall('carry')"
carry/cast_lab 8192x4096 8192x28672 4096x14336 128256x4096 | grep -E 'shape|fp8_cast|DIFFERS'
for t in fp8 cuda_elementwise adamw lm_head_fp8; do
  echo "## $t"; carry/tests/${t}_gpu_test --gtest_brief=1 2>&1 | grep -E "FAILED|Failure|PASSED|expected|Which" | head -20
done
echo "## trainer_cuda (FP8)"
carry/tests/trainer_cuda_gpu_test --gtest_brief=1 --gtest_filter='*Fp8*' 2>&1 | grep -E "FAILED|Failure|PASSED|final" | head
echo "### the fastest row"
carry/trainbench train --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-recipe delayed --fp8-lm-head \
  --fp8-attention --moments bf16 --grads bf16 --steps 25 --warmup-steps 5 --no-op-profile --out "$OUT/results" \
  > "$OUT/fastest.log" 2>&1
echo "exit $? $(grep -E '^summary' "$OUT/fastest.log")"
echo "losses $(grep -oE 'loss [0-9.]+ \| lr [0-9.e-]+ \| grad_norm [0-9.]+' "$OUT/fastest.log" | md5sum | cut -c1-12)"
rm -rf "$OUT/results"
