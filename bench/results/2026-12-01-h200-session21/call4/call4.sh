# Session 21, call 4: what sets trainbench's lower SM clock at the power cap (call 3: the same GEMM kernels as the
# torch peer, 3-4% slower per kernel, at 1557-1561 MHz against the peer's 1616-1625 and about the same power). Candidates:
# the data (trainbench's default task is markov, the peer draws random tokens and targets) and the fp32 weight
# gradients (wgrad kernels writing fp32, `tss`, against the peer's bf16, `tst`). 8B L8 BF16: markov, random, markov,
# random, then each with --grads bf16, then the peer; nvidia-smi at 100 ms. Prediction: if the data sets the clock,
# --data random runs at the peer's ~1620 MHz and ~3% faster.
set -u
source bench/gpu_env.sh
mkdir -p "$OUT/w"
nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,temperature.gpu,clocks_event_reasons.sw_power_cap \
  --format=csv,noheader -lms 100 > "$OUT/w/smi.csv" 2>&1 &
smi=$!
mark() { echo "$(date -u +%H:%M:%S.%N | cut -c1-12) $*" >> "$OUT/w/marks.txt"; }
s8="--model llama3.1-8b --layers 8 --seq 8192"
ours() {  # ours NAME ARGS...
  local name=$1; shift
  mark "start $name"
  carry/trainbench train --steps 25 --warmup-steps 5 --no-op-profile --out "$OUT/w/results/$name" "$@" \
    > "$OUT/w/$name.log" 2>&1
  local rc=$?; mark "end $name"
  echo "$name (exit $rc): $(grep -E '^summary' "$OUT/w/$name.log" | sed 's/.*step_s median \([0-9.]*\).*/step \1 s/') |" \
    "$(grep -E 'power .* mean' "$OUT/w/$name.log" | sed 's/^ *//')"
  grep -E "^step 25/" "$OUT/w/$name.log"
}
ours markov-1 $s8
ours random-1 $s8 --data random
ours markov-2 $s8
ours random-2 $s8 --data random
ours markov-g16 $s8 --grads bf16
ours random-g16 $s8 --data random --grads bf16
mark "start peer"
python3 bench/peers/torch_train.py --steps 20 --warmup 5 $s8 --state bf16 > "$OUT/w/peer.json" 2> "$OUT/w/peer.err"
mark "end peer"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('peer step %.1f ms' % (1e3 * d['step_s']['median']), 'loss', d['loss_last'])" "$OUT/w/peer.json"
kill $smi
python3 bench/smi_phases.py "$OUT/w/smi.csv" "$OUT/w/marks.txt"
rm -rf "$OUT/w/results"; gzip "$OUT/w/smi.csv"
tar czf "$OUT/logs.tgz" -C "$OUT/w" . && rm -rf "$OUT/w"
