# Session 20, call 4: the FP8 cast + transpose's vector kernel replaced (ops/cuda/fp8_cast.cuh
# cast_transpose_blocks_kernel): each thread casts an 8 x 8 block (8 rows read before any code is written), q as 8
# row stores, qt as the block's columns transposed in registers; no shared memory. Replaces the 64 x 64 tiles staged
# through shared memory (2.8-3.3 TB/s). Calls 1-3 (cast_lab): 128-row tiles slower (bank conflicts, 116 registers),
# this layout 3.4-3.8 TB/s for a bf16 matrix. Registers (ptxas here): Bf16Source 64, the activation / softmax-gradient
# sources 128, SwiGLU's backward (two halves) 254, norms 80.
# Prediction: plain casts (~5 ms of the fastest row's ~14 ms of cast-type kernels) -15 to -20%; the others unknown
# (their registers halve the blocks per SM): step -1 to -3 ms. Numerics: the same codes and amax, so the fastest
# row's losses equal the HEAD build's bit for bit (its step is deterministic: call 1).
# Then the GPU tests of every kernel on the cast kernels, the step: HEAD build (carry/trainbench-old) and this one
# alternating, FP8 delayed + head with op profiles, the fastest row twice each, the torch BF16 peer between them.
set -u
source bench/gpu_env.sh
python3 -c "import tarfile; tarfile.open('carry/bins.tar.xz').extractall('carry')"  # the binaries, xz (carry's limit)
carry/cast_lab 8192x4096 8192x28672 4096x14336 128256x4096
for t in fp8 cuda_elementwise adamw lm_head_fp8; do
  echo "## $t"; carry/tests/${t}_gpu_test --gtest_brief=1 > "$OUT/$t.log" 2>&1
  grep -E "FAILED|Failure|PASSED|expected|Which|Value of|Actual|Trace|differ" "$OUT/$t.log" | head -30
done
echo "## trainer_cuda (FP8)"
carry/tests/trainer_cuda_gpu_test --gtest_brief=1 --gtest_filter='*Fp8*' 2>&1 | grep -E "FAILED|Failure|PASSED|final" | head
s8="--model llama3.1-8b --layers 8 --seq 8192"
dh="--precision fp8 --fp8-recipe delayed --fp8-lm-head"
best="$dh --fp8-attention --moments bf16 --grads bf16"
run() {  # run NAME BINARY ARGS...
  local name=$1 bin=$2; shift 2
  echo "### $name"
  $bin train $s8 --steps 25 --warmup-steps 5 --out "$OUT/results/$name" "$@" > "$OUT/$name.log" 2>&1; echo "exit $?"
  grep -E "^summary|  (fp8|norm fwd|activation|lm head|grad norm|attention|sum)" "$OUT/$name.log"
  echo "losses $(grep -oE 'loss [0-9.]+ \| lr [0-9.e-]+ \| grad_norm [0-9.]+' "$OUT/$name.log" | md5sum | cut -c1-12)"
}
run dh-old carry/trainbench-old $dh
run dh-new carry/trainbench $dh
run best-old-1 carry/trainbench-old $best --no-op-profile
run best-new-1 carry/trainbench $best --no-op-profile
echo "### torch"
python3 bench/peers/torch_train.py --steps 20 --warmup 5 $s8 --state bf16 > "$OUT/peer.json" 2> "$OUT/peer.err"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('torch %.1f ms' % (8192e3 / d['tokens_per_s']))" "$OUT/peer.json"
run best-new-2 carry/trainbench $best --no-op-profile
run best-old-2 carry/trainbench-old $best --no-op-profile
rm -rf "$OUT/results"
