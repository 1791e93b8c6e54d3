# Session 17, call 3: the linear layers' output gradients rounded stochastically to E5M2 (--fp8-grad-rounding
# stochastic; the kernels the FP8 head's stochastic rounding uses). trainer_cuda's FP8 learning test (both recipes with
# it), then accuracy per seed where the 1.5% bound can be read: the 76 M model at the Llama vocabulary, LR 1e-4, seeds
# 1-6, 8 M bytes of text (TEXT_BYTES=8000000 scripts/carry.sh): BF16, FP8 delayed, + stochastic gradients, + the FP8
# head, FP8 delayed + the head (`bench/train_acceptance.sh fp8gradsr`). Then its cost at 8B L8 (no profile).
# Predicted: FP8 delayed's own cost (+1.0% mean at 3e-4, 5 of 6 seeds within 1.5% at 1e-4) is partly rounding bias
# of the gradients; stochastic rounding may lower it; its cost ~1-3 ms at 8B L8 (2.8 G gradient elements per step).
set -u
source bench/gpu_env.sh
carry/tests/trainer_cuda_gpu_test --gtest_filter='*Fp8Learns*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|expected|Which|final" | head -20
bench/train_acceptance.sh fp8gradsr > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-acc.tgz"; mv "$OUT/train.log" "$OUT/acc.log"
tail -30 "$OUT/acc.log"
dh="--precision fp8 --fp8-recipe delayed --fp8-lm-head"
for r in nearest stochastic; do
  carry/trainbench train --model llama3.1-8b --layers 8 --seq 8192 $dh --fp8-grad-rounding $r --steps 25 \
    --warmup-steps 5 --no-op-profile 2>&1 | grep -E "^summary" | sed "s/^/grad rounding $r: /"
done
