# Session 19, call 10: call 9 again with the kernels' names in the trace, so bench/kernel_busy.py --by-op gives the op
# profile of the replayed steps at their own (power-limited) clock, beside the eager step's profile that `train`
# prints: 8B L8 BF16 (the default), the fastest FP8 row, 70B L2 BF16.
set -u
source bench/gpu_env.sh
for run in "8b-bf16|--model llama3.1-8b --layers 8" \
    "8b-fastest|--model llama3.1-8b --layers 8 --precision fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention --moments bf16 --grads bf16" \
    "70b-bf16|--model llama3.1-70b --layers 2"; do
  name=${run%%|*}; args=${run#*|}
  echo "### $name: $args"
  CUDA_INJECTION64_PATH=$PWD/carry/libkernel_trace.so LD_LIBRARY_PATH=$PWD/carry/cupti:$LD_LIBRARY_PATH \
    KERNEL_TRACE_OUT=$OUT/$name.csv carry/trainbench train $args --seq 8192 --steps 12 --warmup-steps 4 \
    --out "$OUT/results/$name" > "$OUT/$name.log" 2>&1
  echo "exit $?"
  grep -E "^summary" "$OUT/$name.log"
  python3 bench/kernel_busy.py "$OUT/$name.csv" --by-op | tail -14
  gzip "$OUT/$name.csv"
done
rm -rf "$OUT/results"
