# Session 19, call 5: record_block_amax skips its atomicMax when the amax there already covers the block (every FP8
# cast, norm, activation and AdamW-copy kernel records its amax through it). Call 4 found the read-only pass of one
# 64 x 64 tile per block at ~2.2 TB/s with one same-address atomic per block (~4 ns each). Prediction: the cast lab's
# production kernel 3.2 -> ~3.6-3.9 TB/s at the large shapes (near "V no amax"); in the 8B L8 FP8 step the cast-type
# ops (weight casts, fp8 casts, attention casts, norm fwd, activation fwd/bwd: ~14 ms) faster by ~10%: -1 to -1.5 ms.
# Then the GPU tests of every kernel that records an amax (exact amax and NaN tests included), and the step: the
# HEAD build (carry/trainbench-old) and this one alternating, FP8 delayed + head with op profiles, the fastest row
# twice each, and the torch BF16 peer once between them.
set -u
source bench/gpu_env.sh
carry/cast_lab 8192x4096 8192x28672 128256x4096 | grep -E 'shape|fp8_cast|only|no amax|V<64,64,8>'
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
  grep -E "^summary|  (fp8|norm fwd|activation|grad norm|attention|sum)" "$OUT/$name.log"
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
