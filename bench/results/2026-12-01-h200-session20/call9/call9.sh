# Session 20, call 9: bench/ab_train.sh on the GPU machine (carry: `TESTS=fp8 PREV=<HEAD 79df47f build> PACK=1
# TEXT_BYTES=0 scripts/carry.sh`): the fastest FP8 row, this build against the HEAD build twice each, the torch BF16
# peer before and after. Prediction: as call 6 (new -2 to -3 ms, 1.57-1.59x the peer against 1.54-1.56x), losses the
# same in every run.
set -u
export OUT=${OUT:-/tmp/tb-out}
bench/ab_train.sh -n 2 --peer "--model llama3.1-8b --layers 8 --seq 8192 --state bf16" -- \
  --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention \
  --moments bf16 --grads bf16
