# Session 19, call 1 (carry: TEXT_BYTES=8000000 scripts/carry.sh): the accuracy of the fastest FP8 row (delayed + head
# + FP8 attention with bf16 moments and gradients, the peer's state), never measured at the calm setting where the
# per-seed bound means something: the 76 M model at the Llama vocabulary on text, micro-batch 8, seq 1024, LR 1e-4,
# 500 steps, seeds 1-6 (bench/train_acceptance.sh fastacc). Then the fastest row's op profile (8B L8).
set -u
source bench/gpu_env.sh
bench/train_acceptance.sh fastacc > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-acc.tgz"; mv "$OUT/train.log" "$OUT/acc.log"
tail -45 "$OUT/acc.log"
carry/trainbench train --model llama3.1-8b --layers 8 --seq 8192 --steps 25 --warmup-steps 5 --precision fp8 \
  --fp8-recipe delayed --fp8-lm-head --fp8-attention --moments bf16 --grads bf16 --out "$OUT/results/fastest" \
  > "$OUT/fastest.log" 2>&1; echo "exit $?"
sed -n '/^summary/,$p' "$OUT/fastest.log"
rm -rf "$OUT/results"
