# Session 16, call 1: where the FP8 LM head loses accuracy. `--fp8-lm-head-gemms` runs any of the head's three GEMMs
# (forward logits, dgrad dx, wgrad dW) in BF16 instead. GPU tests of the change, the speed of each set at 8B L8
# (predicted: a BF16 forward +5.4 ms, a BF16 backward +11 ms plus a softmax pass), then their accuracy on the 76 M
# model at the Llama vocabulary, seeds 1-3 (TEXT_BYTES=8000000 scripts/carry.sh).
set -u
source bench/gpu_env.sh
for t in lm_head_fp8 decoder_cuda trainer_cuda; do
  echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 || echo "FAILED: $t"
done > "$OUT/tests.log" 2>&1
tail -25 "$OUT/tests.log"
STEPS=15 WARM=4 bench/train_acceptance.sh fp8headgemms > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-speed.tgz"; mv "$OUT/train.log" "$OUT/speed.log"
grep -E "^### |^train |^summary|memory: peak|lm head|attention bwd" "$OUT/speed.log" | head -60
ACC_SEEDS="1 2 3" bench/train_acceptance.sh fp8headgemmsacc > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-acc.tgz"; mv "$OUT/train.log" "$OUT/acc.log"
tail -12 "$OUT/acc.log"
