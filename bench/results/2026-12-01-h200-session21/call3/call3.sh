# Session 21, call 3: why the torch peer runs at a higher SM clock than trainbench for the same step time (call 2,
# nvidia-smi: peer 1603-1638 MHz at 655-661 W, trainbench 1436-1554 MHz at 680 W, both at sw_power_cap): the CUPTI
# kernel trace of both at 8B L8 (trainbench's replayed steps; the peer's last 10 eager steps), kernel time by op and the
# top kernels per step, with nvidia-smi sampling power and clock. Prediction: equal GEMM kernel time per step would mean
# the clocks differ for another reason; the peer's GEMMs several ms faster would put its lead in the clock.
set -u
source bench/gpu_env.sh
mkdir -p "$OUT/w"
nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,temperature.gpu,clocks_event_reasons.sw_power_cap \
  --format=csv,noheader -lms 100 > "$OUT/w/smi.csv" 2>&1 &
smi=$!
mark() { echo "$(date -u +%H:%M:%S.%N | cut -c1-12) $*" | tee -a "$OUT/w/marks.txt"; }
trace() { CUDA_INJECTION64_PATH=$PWD/carry/libkernel_trace.so LD_LIBRARY_PATH=$PWD/carry/cupti:$LD_LIBRARY_PATH \
  KERNEL_TRACE_OUT=$OUT/w/$1.csv "${@:2}"; }
s8="--model llama3.1-8b --layers 8 --seq 8192"
for i in 1 2; do
  mark "start ours-$i"
  trace ours-$i carry/trainbench train $s8 --steps 14 --warmup-steps 4 --no-op-profile --out "$OUT/w/results/ours-$i" \
    > "$OUT/w/ours-$i.log" 2>&1
  echo "exit $?"; mark "end ours-$i"
  grep -E "^summary|power" "$OUT/w/ours-$i.log"
  python3 bench/kernel_busy.py "$OUT/w/ours-$i.csv" --by-op --top 25 | sed -n '/^median/,$p'
  mark "start peer-$i"
  trace peer-$i python3 bench/peers/torch_train.py --steps 20 --warmup 5 $s8 --state bf16 > "$OUT/w/peer-$i.json" \
    2> "$OUT/w/peer-$i.err"
  echo "exit $?"; mark "end peer-$i"
  ms=$(python3 -c "import json,sys; print(1e3 * json.load(open(sys.argv[1]))['step_s']['median'])" "$OUT/w/peer-$i.json")
  echo "peer step $ms ms"
  python3 bench/kernel_busy.py "$OUT/w/peer-$i.csv" --eager 10 --step-ms "$ms" --top 25
done
kill $smi
python3 bench/smi_phases.py "$OUT/w/smi.csv" "$OUT/w/marks.txt"
rm -rf "$OUT/w/results"; gzip "$OUT/w/"*.csv
tar czf "$OUT/logs.tgz" -C "$OUT/w" . && rm -rf "$OUT/w"
