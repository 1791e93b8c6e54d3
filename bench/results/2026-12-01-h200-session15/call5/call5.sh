# Session 15, call 5: call 4's trainer test again after its fix (the E4M3-head run's --fp8-lm-head-grad was left set
# for the runs without the FP8 head, which validate() now refuses).
set -u
source bench/gpu_env.sh
carry/tests/trainer_cuda_gpu_test --gtest_brief=1 2>&1 | grep -E "final loss|PASSED|FAILED|Failure|refus" | head -20
