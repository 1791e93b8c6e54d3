# Session 18, call 6: the fastest FP8 row (delayed + head + FP8 attention, bf16 moments and gradients; `auto` casts
# the weights apart with bf16 moments) and the torch BF16 peer, alternating three times each in one call, so the
# ratio is read from medians of the same call (call 2: 1.554x; call 4: 1.549x and 1.541x).
set -u
source bench/gpu_env.sh
s8="--model llama3.1-8b --layers 8 --seq 8192"
best="--precision fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention --moments bf16 --grads bf16"
for i in 1 2 3; do
  echo "### torch $i"
  python3 bench/peers/torch_train.py --steps 20 --warmup 5 $s8 --state bf16 > "$OUT/peer-$i.json" 2> "$OUT/peer-$i.err"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('torch %.1f ms' % (8192e3 / d['tokens_per_s']))" "$OUT/peer-$i.json"
  echo "### fp8 best $i"
  carry/trainbench train $s8 $best --steps 25 --warmup-steps 5 --no-op-profile --out "$OUT/results/best-$i" \
    > "$OUT/best-$i.log" 2>&1; echo "exit $?"; grep -E "^summary" "$OUT/best-$i.log"
done
