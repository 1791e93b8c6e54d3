# Session 21, call 2: issue 3's 70B target on the current build (e3831d2), one H200: Llama 3.1 70B shapes with 2
# layers, BF16 default (fp32 master weights and moments) alternating with the torch peer (ours, peer bf16, ours, peer
# fp32, ours, peer bf16), then the CUPTI trace of the replayed steps. Outputs packed in one archive (call 1 lost files:
# the device returns few files).
# Prediction: ours 248-254 ms, the bf16-state peer 250-256 (ratio 0.99-1.02), the fp32-state peer 270-280 (1.07-1.09).
set -u
source bench/gpu_env.sh
mkdir -p "$OUT/w"
nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,temperature.gpu,clocks_event_reasons.sw_power_cap \
  --format=csv,noheader -lms 250 > "$OUT/w/smi.csv" 2>&1 &
smi=$!
mark() { echo "$(date -u +%H:%M:%S.%N | cut -c1-12) $*" | tee -a "$OUT/w/marks.txt"; }
s70="--model llama3.1-70b --layers 2 --seq 8192"
ours() {  # ours NAME ARGS...
  local name=$1; shift
  mark "start $name"
  carry/trainbench train --steps 25 --warmup-steps 5 --out "$OUT/w/results/$name" "$@" > "$OUT/w/$name.log" 2>&1
  echo "exit $?"; mark "end $name"; grep -E "^summary|memory: peak|power" "$OUT/w/$name.log" | head -4
}
peer() {  # peer NAME ARGS...
  local name=$1; shift
  mark "start $name"
  python3 bench/peers/torch_train.py --steps 20 --warmup 5 "$@" > "$OUT/w/$name.json" 2> "$OUT/w/$name.err"
  echo "exit $?"; mark "end $name"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], 'step %.1f ms' % (1e3 * d['step_s']['median']), 'tokens/s %.0f' % d['tokens_per_s'], 'peak alloc %.2f GiB' % d['max_memory_allocated_gib'], 'sdpa', d['sdpa'])" "$OUT/w/$name.json" "$name"
}
ours 70b-1 $s70
peer peer-bf16-1 $s70 --state bf16
ours 70b-2 $s70
peer peer-fp32 $s70 --state fp32
ours 70b-3 $s70
peer peer-bf16-2 $s70 --state bf16
mark "start trace"
CUDA_INJECTION64_PATH=$PWD/carry/libkernel_trace.so LD_LIBRARY_PATH=$PWD/carry/cupti:$LD_LIBRARY_PATH \
  KERNEL_TRACE_OUT=$OUT/w/trace.csv carry/trainbench train $s70 --steps 12 --warmup-steps 4 \
  --out "$OUT/w/results/trace" > "$OUT/w/trace.log" 2>&1
echo "exit $?"; mark "end trace"
grep -E "^summary" "$OUT/w/trace.log"
python3 bench/kernel_busy.py "$OUT/w/trace.csv" --by-op | tail -14
kill $smi
rm -rf "$OUT/w/results"; rm -f "$OUT/w/trace.csv"
tar czf "$OUT/logs.tgz" -C "$OUT/w" . && rm -rf "$OUT/w"
