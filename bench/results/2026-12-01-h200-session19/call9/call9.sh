# Session 19, call 9: issue 3's criterion "step time with graph replay within 1% of the sum of kernel times", in the
# replayed steps themselves (call 8: no nsys on the machine; the op profile's eager step runs at another clock under
# the power limit, 3.7% below the replayed step in call 1). bench/lab/kernel_trace (a CUPTI injection library,
# CUPTI 13.0.85 carried) records every kernel of the run and each cudaGraphLaunch; bench/kernel_busy.py sums each
# replay's kernels. Runs: 8B L8 BF16 (the default), then the fastest FP8 row. Prediction: span / sum - 1 < 0.5% (~1-2
# us between each of several hundred kernels), the period above the span by the host's per-step work (well under 1%).
set -u
source bench/gpu_env.sh
s8="--model llama3.1-8b --layers 8 --seq 8192 --steps 12 --warmup-steps 4 --no-op-profile"
for run in "bf16|" "fastest|--precision fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention --moments bf16 --grads bf16"; do
  name=${run%%|*}; args=${run#*|}
  echo "### $name: $args"
  CUDA_INJECTION64_PATH=$PWD/carry/libkernel_trace.so LD_LIBRARY_PATH=$PWD/carry/cupti:$LD_LIBRARY_PATH \
    KERNEL_TRACE_OUT=$OUT/$name.csv carry/trainbench train $s8 $args --out "$OUT/results/$name" > "$OUT/$name.log" 2>&1
  echo "exit $?"
  grep -E "kernel_trace|^summary|graph" "$OUT/$name.log"
  python3 bench/kernel_busy.py "$OUT/$name.csv"
  gzip "$OUT/$name.csv"
done
rm -rf "$OUT/results"
