# Session 18, call 7 (nvidia-h200-x2, lent again): AdamW's FP8 weight copies under tensor and pipeline parallel, now
# switched on there (each rank updates its whole weights; ZeRO-1's shards under data / context parallel still cast):
# `bench/parallel_acceptance.sh fp8fusedpar` (tp 2, pp 2, pp 2 vp 2; fused vs separate bit for bit).
set -u
source bench/gpu_env.sh
bench/parallel_acceptance.sh fp8fusedpar > /dev/null 2>&1
grep -E "^### |weight_cast|largest|exit [1-9]|differ|Error|error" "$OUT"/*.log | head -60
