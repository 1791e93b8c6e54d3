# Session 20, call 7: issue 5's speed and memory targets on the build with the vector cast kernel (calls 4-6), one
# call: 8B L8 BF16, FP8 delayed + head (the 1.40x row), the fastest row (+ FP8 attention, the peer's state: bf16
# moments and gradients), 70B L2 BF16 and FP8 delayed + head, the torch BF16 peer between the 8B and 70B runs.
# Prediction: FP8/BF16 at 8B 1.42-1.50x, at 70B 1.51-1.56x, the fastest row 1.57-1.59x the peer; memory as before.
set -u
source bench/gpu_env.sh
s8="--model llama3.1-8b --layers 8 --seq 8192"
s70="--model llama3.1-70b --layers 2 --seq 8192"
dh="--precision fp8 --fp8-recipe delayed --fp8-lm-head"
run() {  # run NAME ARGS...
  local name=$1; shift
  echo "### $name: $*"
  carry/trainbench train --steps 25 --warmup-steps 5 --no-op-profile --out "$OUT/results/$name" "$@" \
    > "$OUT/$name.log" 2>&1
  echo "exit $?"; grep -E "^summary|memory: peak" "$OUT/$name.log" | head -2
}
run 8b-bf16 $s8
run 8b-fp8-dh $s8 $dh
run 8b-fastest $s8 $dh --fp8-attention --moments bf16 --grads bf16
echo "### torch"
python3 bench/peers/torch_train.py --steps 20 --warmup 5 $s8 --state bf16 > "$OUT/peer.json" 2> "$OUT/peer.err"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('torch %.1f ms, peak %.2f GiB allocated' % (8192e3 / d['tokens_per_s'], d['max_memory_allocated_gib']))" "$OUT/peer.json"
run 8b-fastest-2 $s8 $dh --fp8-attention --moments bf16 --grads bf16
run 70b-bf16 $s70
run 70b-fp8-dh $s70 $dh
rm -rf "$OUT/results"
