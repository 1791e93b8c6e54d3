# Session 19, call 6 (carry: TEXT_BYTES=8000000 scripts/carry.sh): call 1's accuracy table of the fastest FP8 row at
# a livelier learning rate, LR 3e-4 (where the FP8 head cost +2.8% before its logit gradients were rounded
# stochastically, session 15-16): bench/train_acceptance.sh fastacc with ACC_LR=3e-4, seeds 1-6.
set -u
source bench/gpu_env.sh
ACC_LR=3e-4 bench/train_acceptance.sh fastacc > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-acc.tgz"; mv "$OUT/train.log" "$OUT/acc.log"
tail -22 "$OUT/acc.log"
rm -rf "$OUT/results"
