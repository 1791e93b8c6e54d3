# Session 18, call 4: the call-2 rows that decide the FP8 targets, again and interleaved with the torch BF16 peer
# (call 2: FP8 delayed + head + FP8 attention + bf16 moments + bf16 gradients 145.8 ms = 1.554x the peer's 226.6 ms,
# memory +9.6% over BF16 with the same state): that row twice, around the peer; BF16 with the same state; FP8 without
# FP8 attention (bf16 moments and gradients); the default BF16 row.
set -u
source bench/gpu_env.sh
s8="--model llama3.1-8b --layers 8 --seq 8192"
dh="--precision fp8 --fp8-recipe delayed --fp8-lm-head"
TB=carry/trainbench
ours() {
  local name=$1; shift
  echo "### $name: $*"
  $TB train $s8 --steps 25 --warmup-steps 5 --no-op-profile --out "$OUT/results/$name" "$@" > "$OUT/$name.log" 2>&1
  echo "exit $?"; grep -E "^summary|memory: peak" "$OUT/$name.log"
}
ours fp8-dh-attn-m16-g16-a $dh --fp8-attention --moments bf16 --grads bf16
ours bf16-m16-g16 --moments bf16 --grads bf16
echo "### torch 8b-L8-bf16"
python3 bench/peers/torch_train.py --steps 20 --warmup 5 $s8 --state bf16 > "$OUT/peer.json"; echo "exit $?"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('torch tokens/s %.0f, %.1f ms' % (d['tokens_per_s'], 8192e3 / d['tokens_per_s']))" "$OUT/peer.json"
ours fp8-dh-attn-m16-g16-b $dh --fp8-attention --moments bf16 --grads bf16
ours fp8-dh-m16-g16 $dh --moments bf16 --grads bf16
ours bf16
