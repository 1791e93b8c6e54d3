# Session 18, call 3 (carry: TEXT_BYTES=8000000 scripts/carry.sh): what bf16 weight gradients cost in accuracy, in the
# setting of the FP8 head's accuracy runs (sessions 16-17): the 76 M model at the Llama vocabulary on text, micro-batch
# 8, seq 1024, LR 1e-4, 500 steps, seeds 1-6; BF16 and FP8 delayed + head, each with fp32 and bf16 gradients.
set -u
source bench/gpu_env.sh
bench/train_acceptance.sh gradsacc > /dev/null
mv "$OUT/results-train.tgz" "$OUT/results-acc.tgz"; mv "$OUT/train.log" "$OUT/acc.log"
tail -40 "$OUT/acc.log"
