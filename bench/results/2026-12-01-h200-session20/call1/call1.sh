# Session 20, call 1: the FP8 cast + transpose tile kernel loads all of a thread's vectors before it writes any code
# (every pass's loads in flight together; before, one pass at a time), and one-half sources run 128 x 128 tiles with
# 16-byte transposed stores (8 loads of 16 bytes in flight per thread) where the shape allows (ops/cuda/fp8_cast.cuh).
# Session 19 measured read-only passes at 4.4-4.6 TB/s with 8 loads in flight and 3.1-3.3 with 2, the production
# kernel at 2.8-3.3 against ~4.2 for copies. Prediction: cast_lab's fp8_cast 3.7-4.2 TB/s at the large shapes; in the
# fastest FP8 row ~14 ms of cast-type kernels (plain casts, SwiGLU fwd/bwd, the logit gradients, norms) faster by
# 20-30%: -3 to -4 ms of ~146 (1.55x -> ~1.59x the peer). Numerics unchanged: the same codes, the same amax (a max), so
# the runs' losses equal the HEAD build's where the step is deterministic (the fastest row is).
# Then: the GPU tests of every kernel on the tile kernel, registers per thread of its instances, the step: HEAD build
# (carry/trainbench-old) and this one alternating, FP8 delayed + head with op profiles, the fastest row twice each, the
# torch BF16 peer once between them.
set -u
source bench/gpu_env.sh
python3 -c "import tarfile; tarfile.open('carry/bins.tar.xz').extractall('carry')"  # the binaries, xz (carry's limit)
echo "## cast_lab, HEAD build then this one"
for lab in carry/cast_lab-old carry/cast_lab; do
  echo "# $lab"; $lab 8192x4096 8192x28672 4096x14336 128256x4096 | grep -E 'shape|fp8_cast|V<|R 128|R stream|DIFFERS'
done
echo "## registers (cast_transpose_tiles_kernel)"
cuobjdump --dump-resource-usage carry/trainbench 2>/dev/null | grep -A1 cast_transpose_tiles | grep -oE "(Function [^:]*|REG:[0-9]+|STACK:[0-9]+|SHARED:[0-9]+)" | paste - - - - | sed 's/Function _ZN2tb3ops//' | cut -c1-200 | sort | uniq | head -40
for t in fp8 cuda_elementwise adamw lm_head_fp8; do
  echo "## $t"; carry/tests/${t}_gpu_test --gtest_brief=1 2>&1 | grep -E "FAILED|Failure|PASSED|expected|Which" | head -20
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
