# Session 17, call 1: AdamW writing the linear layers' FP8 weight copies (--fp8-weight-cast fused). GPU tests of it
# (adamw: bit for bit the step then the cast; trainer_cuda: fused trains bit for bit like separate), then
# `bench/train_acceptance.sh fp8fused`. Predicted: the layers' weight casts (8B L8: 1.75 G weights, 7 GB at ~3 TB/s,
# ~2.3 ms) leave the step and AdamW writes 3.5 GB more (~0.9 ms): -1.0 to -1.5 ms per 8B L8 and 70B L2 step.
set -u
source bench/gpu_env.sh
for t in adamw fp8; do carry/tests/${t}_gpu_test 2>&1 | tail -3; done
carry/tests/trainer_cuda_gpu_test --gtest_filter='*Fp8*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|expected|Which|fp8" | head -40
bench/train_acceptance.sh fp8fused > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-speed.tgz"; mv "$OUT/train.log" "$OUT/speed.log"
grep -E "^### |^train |^summary|memory: peak|^torch|fp8 weight casts|grad norm \+ AdamW" "$OUT/speed.log" | head -80
