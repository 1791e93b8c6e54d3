# Session 18, call 1: bf16 weight gradients (--grads bf16). GPU tests of every changed kernel and path (AdamW and the
# gradient norm reading bf16, norm / embedding / position backward and the LM head writing bf16, the decoder against
# the CPU reference, shared = separate, the trainer), then 8B L8 BF16 and FP8 delayed + head with fp32 and bf16
# gradients (op profiles). Floor and prediction: the norm and AdamW each read 2 bytes per parameter fewer (2.8 G
# parameters: 5.6 GB each, ~1.4 ms each at 4.1 TB/s): grad norm + AdamW ~21.9 -> ~19.1 ms; the wgrad GEMMs write half
# the bytes (compute-bound: 0 to -1 ms); gradients 10.41 -> 5.21 GiB.
set -u
source bench/gpu_env.sh
for t in adamw cuda_elementwise lm_head_fp8 cross_entropy decoder_cuda; do
  echo "## $t"; carry/tests/${t}_gpu_test --gtest_brief=1 2>&1 | grep -E "FAILED|Failure|PASSED|expected|Which|bf16 grad" | head -20
done
echo "## trainer_cuda"
carry/tests/trainer_cuda_gpu_test --gtest_filter='*Bf16Gradients*:*SharedGradient*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|expected|Which|peak|final" | head -20
s8="--model llama3.1-8b --layers 8 --seq 8192"
dh="--precision fp8 --fp8-recipe delayed --fp8-lm-head"
TB=carry/trainbench
for run in "bf16|" "bf16-g16|--grads bf16" "fp8-dh|$dh" "fp8-dh-g16|$dh --grads bf16"; do
  name=${run%%|*}; args=${run#*|}
  echo "### 8b-L8-$name: $args"
  $TB train $s8 --steps 25 --warmup-steps 5 --out "$OUT/results/8b-L8-$name" $args > "$OUT/$name.log" 2>&1; echo "exit $?"
  grep -E "^summary|memory: peak|estimate:|gemm wgrad|grad norm \+ AdamW|^  sum|power" "$OUT/$name.log"
done
