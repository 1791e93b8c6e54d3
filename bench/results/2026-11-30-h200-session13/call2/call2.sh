#!/usr/bin/env bash
# call 2: the optimizer's kernels alone (adamw_lab) and the 8B L8 FP8 best step's op profile with bf16 moments.
set -u
carry/adamw_lab 2800
carry/trainbench train --model llama3.1-8b --layers 8 --seq 8192 --steps 12 --warmup-steps 3 --precision fp8 \
  --fp8-recipe delayed --fp8-lm-head --fp8-attention --moments bf16 --out $OUT/r/fp8-bf16m 2>&1 | sed -n '/^summary/,$p'
