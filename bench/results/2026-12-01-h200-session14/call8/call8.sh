# Session 14, call 8: the final build (the norm backward's unused want_db field removed after call 6): the GPU tests
# that run the norms, and `small-gpt` (LayerNorm with bias: the HasDb kernel) trains.
set -u
source bench/gpu_env.sh
for t in cuda_elementwise decoder_cuda decoder_cuda_stages trainer_cuda; do
  echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 2>&1 | grep -E "PASSED|FAILED" | head -3
done
carry/trainbench train --model small-gpt --steps 30 --warmup-steps 5 --no-op-profile --out $OUT/r | grep -E "^ +loss"
rm -rf $OUT/r
