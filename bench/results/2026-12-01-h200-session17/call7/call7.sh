# Session 17, call 7: call 6's adamw test failed in all 4 cases on its own bug: it read Fp8Scales as 64 floats per
# tensor (they are 4 blocks of 64: amax, scale, scale_inv, history), so it compared only tensor 0's scaling state and,
# for tensors 1-2, checked a scale where it meant the amax (tensor 3 hit the zero history). Fixed, with call 4's
# one-tile copy kernel back (call 6's 4 tiles per block was slower). Every tensor's amax, scale and scale_inv now
# compared bit for bit.
set -u
source bench/gpu_env.sh
carry/tests/adamw_gpu_test 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which|actual|amax" | head -40
