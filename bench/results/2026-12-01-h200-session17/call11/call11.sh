# Session 17, call 11: where FP8 attention's accuracy cost comes from (call 5: not its delayed scales' clipping).
# --fp8-attention-emulate (new, a diagnostic): BF16 attention on q, k, v and/or with an O rounded to E4M3 and back, as
# FP8 attention stores them (current scaling, one scale per tensor); P, the softmax and the backward stay BF16.
# `bench/train_acceptance.sh fp8attnemu` (76 M model, micro-batch 4, LR 1e-3, 4 M bytes of text, seeds 1-6), after
# trainer_cuda's FP8 tests (the emulation learns small-hd128 and changes its loss).
# Predicted (session 14's reading): if E4M3 q and k (errors amplified by the softmax's exponential) are the source,
# emulating qkv alone reproduces most of FP8 attention's ~10 points over FP8 delayed; O alone little.
set -u
source bench/gpu_env.sh
carry/tests/trainer_cuda_gpu_test --gtest_filter='*Fp8Learns*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|expected|Which|small-hd128" | head
bench/train_acceptance.sh fp8attnemu > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-acc.tgz"; mv "$OUT/train.log" "$OUT/acc.log"
tail -12 "$OUT/acc.log"
