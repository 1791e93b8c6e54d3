# Session 21, call 1: issue 3's acceptance on the current build (e3831d2), one H200: the training GPU tests; 8B L8
# BF16 (the default: fp32 master weights and moments) alternating with the torch peer in bf16 and fp32 state
# (ours, peer bf16, ours, peer fp32, ours); selective recompute; the CUPTI trace of replayed steps (CPU overhead and
# the op split at the step's own clock). nvidia-smi samples power, SM clock and the power-cap flag throughout.
# Prediction: ours 222-229 ms, the bf16-state peer 226-231 (ratio 0.99-1.02), the fp32-state peer 240-250 (1.06-1.09);
# memory ours 45.5 GiB vs the fp32-state peer 48.7; replay within 1% of the kernel sum.
set -u
source bench/gpu_env.sh
nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,temperature.gpu,clocks_event_reasons.sw_power_cap \
  --format=csv,noheader -lms 250 > "$OUT/smi.csv" 2>&1 &
smi=$!
mark() { echo "$(date -u +%H:%M:%S.%N | cut -c1-12) $*" | tee -a "$OUT/marks.txt"; }
for t in fill decoder_cuda trainer_cuda adamw cross_entropy; do
  echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 2>&1 | tail -3
done
s8="--model llama3.1-8b --layers 8 --seq 8192"
ours() {  # ours NAME ARGS...
  local name=$1; shift
  mark "start $name"
  carry/trainbench train --steps 25 --warmup-steps 5 --out "$OUT/results/$name" "$@" > "$OUT/$name.log" 2>&1
  echo "exit $?"; mark "end $name"; grep -E "^summary|memory: peak|power" "$OUT/$name.log" | head -4
}
peer() {  # peer NAME ARGS...
  local name=$1; shift
  mark "start $name"
  python3 bench/peers/torch_train.py --steps 20 --warmup 5 "$@" > "$OUT/$name.json" 2> "$OUT/$name.err"
  echo "exit $?"; mark "end $name"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], 'step %.1f ms' % (1e3 * d['step_s']['median']), 'tokens/s %.0f' % d['tokens_per_s'], 'peak alloc %.2f GiB' % d['max_memory_allocated_gib'], 'sdpa', d['sdpa'])" "$OUT/$name.json" "$name"
}
ours 8b-1 $s8
peer peer-bf16-1 $s8 --state bf16
ours 8b-2 $s8
peer peer-fp32 $s8 --state fp32
ours 8b-3 $s8
peer peer-bf16-2 $s8 --state bf16
ours 8b-selective $s8 --recompute selective
mark "start trace"
CUDA_INJECTION64_PATH=$PWD/carry/libkernel_trace.so LD_LIBRARY_PATH=$PWD/carry/cupti:$LD_LIBRARY_PATH \
  KERNEL_TRACE_OUT=$OUT/trace.csv carry/trainbench train $s8 --steps 12 --warmup-steps 4 \
  --out "$OUT/results/trace" > "$OUT/trace.log" 2>&1
echo "exit $?"; mark "end trace"
grep -E "^summary" "$OUT/trace.log"
python3 bench/kernel_busy.py "$OUT/trace.csv" --by-op | tail -14
gzip "$OUT/trace.csv"
kill $smi
rm -rf "$OUT/results"
