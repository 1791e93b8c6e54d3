# Session 21, call 9: the final build's `train` summary (energy per token now in mJ with three digits) on the GPU:
# 8B L8 BF16, 12 steps.
set -u
source bench/gpu_env.sh
carry/trainbench train --model llama3.1-8b --layers 8 --seq 8192 --steps 12 --warmup-steps 4 --no-op-profile \
  --out "$OUT/r" 2>&1 | grep -A4 "^summary"
rm -rf "$OUT/r"
