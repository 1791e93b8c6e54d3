#!/usr/bin/env bash
# call 5: the session's final kernels (4-element AdamW vectors, integer split master) and `train --set` on the GPU:
# adamw_lab, the GPU tests that cover AdamW, the decoder's shape check and the trainer; a Llama-like 1B given by --set
# (and a shape the kernels cannot take, refused before any GPU work); bench/train_acceptance.sh fp8best.
set -u
carry/adamw_lab 2800
for t in adamw decoder_cuda trainer_cuda; do echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 2>&1 | tail -3; done
echo "-- train --set (a Llama-like 1B)"
carry/trainbench train --model llama3.1-8b --set layers=16 --set d_model=2048 --set ffn=8192 --set heads=32 \
  --set kv_heads=8 --set head_dim=64 --seq 4096 --steps 8 --warmup-steps 3 --no-op-profile --out $OUT/set1b 2>&1 \
  | grep -E "^train|^summary|memory:"
carry/trainbench train --model small --set head_dim=100; echo "exit $?"
OUT=$OUT/acc bench/train_acceptance.sh fp8best > $OUT/fp8best.log 2>&1
grep -E "^### |^summary|^torch |exit [1-9]" $OUT/fp8best.log
