# Session 16, call 5: the FP8 targets with the stochastic head (calls 3-4: it removes most of the head's accuracy cost
# at +~2 ms), in one call with the BF16 step and the torch peer. Predicted: 8B FP8 delayed + stochastic head ~159.7 ms
# against BF16 ~225-228 (1.41-1.43x), + FP8 attention ~154 (1.46x); 70B ~166 ms against ~252 (1.52x).
set -u
source bench/gpu_env.sh
bench/train_acceptance.sh fp8srtargets > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-speed.tgz"; mv "$OUT/train.log" "$OUT/speed.log"
grep -E "^### |^train |^summary|memory: peak|^torch" "$OUT/speed.log" | head -60
