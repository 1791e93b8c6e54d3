# Session 15, call 1: the FP8 LM head's logit gradients in E4M3 (--fp8-lm-head-grad, new, default e4m3) with the
# hybrid format elsewhere. GPU tests of the head and the trainer's FP8 runs; the accuracy per seed in the setting where
# the E5M2 head cost 9% (session 14 calls 2-3: 76 M model, micro-batch 4, LR 1e-3, 4 M bytes of text, seeds 1-3);
# then 8B L8 BF16 against FP8 delayed + head (E4M3 / E5M2 logit gradients) and + FP8 attention.
set -u
source bench/gpu_env.sh
carry/tests/lm_head_fp8_gpu_test --gtest_brief=1
carry/tests/trainer_cuda_gpu_test --gtest_brief=1 --gtest_filter='*Fp8LearnsLikeBf16*'
bench/train_acceptance.sh fp8headgradacc
mv "$OUT/results-train.tgz" "$OUT/results-acc.tgz"
STEPS=15 WARM=4 bench/train_acceptance.sh fp8headgrad
grep -E "^### trainbench|^summary" "$OUT/train.log" | cut -c1-220
