# Session 16, call 2: the FP8 head's GEMM sets' accuracy (call 1), seeds 4-6, so each set has six seeds.
set -u
source bench/gpu_env.sh
ACC_SEEDS="4 5 6" bench/train_acceptance.sh fp8headgemmsacc > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-acc.tgz"; mv "$OUT/train.log" "$OUT/acc.log"
tail -12 "$OUT/acc.log"
