#!/usr/bin/env bash
# call 3: AdamW with 8-element vectors. adamw_lab before (prev) / after, the GPU tests that run AdamW, then the 8B L8
# FP8 best step before / after with bf16 and fp32 moments, and bench/train_acceptance.sh fp8best on the new build.
set -u
for b in adamw_lab_prev adamw_lab adamw_lab_prev adamw_lab; do echo "-- $b"; carry/$b 2800; done
for t in adamw trainer_cuda; do echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 2>&1 | tail -3; done
best="--model llama3.1-8b --layers 8 --seq 8192 --steps 20 --warmup-steps 5 --no-op-profile --precision fp8 \
--fp8-recipe delayed --fp8-lm-head --fp8-attention"
for b in trainbench-prev trainbench trainbench-prev trainbench; do
  for mo in bf16 f32; do
    echo "-- $b moments $mo: $(carry/$b train $best --moments $mo --out $OUT/ab/$b-$mo 2>&1 | grep '^summary')"
  done
done
OUT=$OUT/acc bench/train_acceptance.sh fp8best > $OUT/fp8best.log 2>&1
grep -E "^### |^summary|^torch |exit [1-9]" $OUT/fp8best.log
