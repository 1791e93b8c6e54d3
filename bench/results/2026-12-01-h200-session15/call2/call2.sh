# Session 15, call 2: FP8 delayed + FP8 head with E4M3 logit gradients (the new default) in the calm setting of
# session 14 calls 4-5 (76 M model, micro-batch 8, LR 3e-4, 8 M bytes of text: TEXT_BYTES=8000000 scripts/carry.sh),
# seeds 1-6, with BF16, the control, delayed alone and the E5M2 head; then the speed: 8B L8 BF16 and delayed + head
# + FP8 attention, 70B L2 BF16 and delayed + head, the torch BF16 peer; the 8B pair again.
set -u
source bench/gpu_env.sh
ACC_SEEDS="1 2 3 4 5 6" ACC_MB=8 ACC_LR=3e-4 bench/train_acceptance.sh fp8headgradacc
mv "$OUT/results-train.tgz" "$OUT/results-acc.tgz"
mv "$OUT/train.log" "$OUT/acc.log"
bench/train_acceptance.sh fp8headgrad
mv "$OUT/results-train.tgz" "$OUT/results-speed1.tgz"
for p in "" "--precision fp8 --fp8-recipe delayed --fp8-lm-head"; do  # the 8B pair again
  echo "### trainbench again: $p"
  carry/trainbench train --model llama3.1-8b --layers 8 --seq 8192 --steps 25 --warmup-steps 5 $p --no-op-profile \
    --out "$OUT/again" | grep -E "^summary"
done
grep -E "^### (trainbench|torch)|^summary|^torch" "$OUT/train.log" | cut -c1-200
tail -12 "$OUT/acc.log"
rm -rf "$OUT/again"
