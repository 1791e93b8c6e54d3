# Session 17, call 5: after limiting AdamW's FP8 copies to one-GPU runs, trainer_cuda's FP8 tests again; then whether
# FP8 attention's accuracy cost at LR 1e-3 (fourteenth session, 76 M model, micro-batch 4, text: delayed + FP8
# attention +14.3% over BF16 where FP8 delayed is +5.1%, on every seed) is saturation of its delayed-scaled outputs
# (O, dS, dq, dk, dv: a step whose amax outgrows the history clips at the format's maximum): `--fp8-margin 2` (scales
# a quarter as large: 2 more binades of headroom, 2 fewer below) against 0, for FP8 delayed alone too (the margin
# applies to every delayed scale). `bench/train_acceptance.sh fp8attnmargin`, carry/ from `scripts/carry.sh` (4 M bytes).
# Predicted: if saturation, margin 2 brings FP8 attention near FP8 delayed on every seed; if the E4M3 q, k, P of the
# forward (current / fixed scales), it changes nothing.
set -u
source bench/gpu_env.sh
carry/tests/trainer_cuda_gpu_test --gtest_filter='*Fp8*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|expected|Which" | head
bench/train_acceptance.sh fp8attnmargin > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-acc.tgz"; mv "$OUT/train.log" "$OUT/acc.log"
tail -12 "$OUT/acc.log"
