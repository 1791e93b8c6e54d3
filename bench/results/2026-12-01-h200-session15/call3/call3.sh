# Session 15, call 3: the FP8 head's logit-gradient format at the Llama 3 vocabulary. The 76 M model's vocabulary is
# 512 (byte text uses 256 of them); with 128256 entries most probabilities sit far below the largest logit gradient,
# where E4M3 (17.8 binades below its maximum, subnormals included) drops or coarsens what E5M2 (31.8) keeps. The same
# model with --set vocab=128256 on the 8 M bytes of text (TEXT_BYTES=8000000 scripts/carry.sh): calls 1 and 2's
# settings (micro-batch 4, LR 1e-3, seeds 1-3; micro-batch 8, LR 3e-4, seeds 1-6), BF16, the control, FP8 delayed,
# + head with E4M3 / E5M2 logit gradients, + FP8 attention.
set -u
source bench/gpu_env.sh
ACC_ARGS="--set vocab=128256" bench/train_acceptance.sh fp8headgradacc
mv "$OUT/results-train.tgz" "$OUT/results-lr1e-3.tgz"; mv "$OUT/train.log" "$OUT/lr1e-3.log"
ACC_ARGS="--set vocab=128256" ACC_SEEDS="1 2 3 4 5 6" ACC_MB=8 ACC_LR=3e-4 bench/train_acceptance.sh fp8headgradacc
mv "$OUT/results-train.tgz" "$OUT/results-lr3e-4.tgz"; mv "$OUT/train.log" "$OUT/lr3e-4.log"
tail -11 "$OUT/lr1e-3.log"; tail -11 "$OUT/lr3e-4.log"
