# Session 16, call 3: stochastic rounding of the FP8 head's logit gradients (--fp8-lm-head-rounding stochastic).
# Calls 1-2 put the head's accuracy cost in its backward (the E5M2 logit gradients). Most of a row's 128256 gradients
# are small probabilities of similar size, which nearest rounding moves the same way: a bias in dx and dW's sums that
# stochastic rounding removes. GPU tests (the cast's rounding, the head, the trainer), the speed at 8B L8 (predicted: the
# same, +<0.5 ms if the hash makes the cast compute-bound), accuracy seeds 1-3 (TEXT_BYTES=8000000 scripts/carry.sh).
set -u
source bench/gpu_env.sh
for t in fp8 lm_head_fp8 trainer_cuda; do
  echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 || echo "FAILED: $t"
done > "$OUT/tests.log" 2>&1
tail -25 "$OUT/tests.log"
STEPS=15 WARM=4 bench/train_acceptance.sh fp8headsr > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-speed.tgz"; mv "$OUT/train.log" "$OUT/speed.log"
grep -E "^### |^train |^summary|memory: peak|lm head|sum  " "$OUT/speed.log" | head -60
ACC_SEEDS="1 2 3" bench/train_acceptance.sh fp8headsracc > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-acc.tgz"; mv "$OUT/train.log" "$OUT/acc.log"
tail -10 "$OUT/acc.log"
