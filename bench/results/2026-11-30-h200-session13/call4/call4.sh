#!/usr/bin/env bash
# call 4: the split master's halves in integer arithmetic (no ldexpf). adamw_lab: prev (HEAD: 4-element vectors and
# ldexpf), v4int (4-element vectors, integer split), new (8-element vectors, integer split); the GPU tests that run
# AdamW; the 8B L8 FP8 best step prev / new with bf16 and fp32 moments; bench/train_acceptance.sh fp8best (new).
set -u
for r in 1 2; do for b in adamw_lab_prev adamw_lab_v4int adamw_lab; do echo "-- $b"; carry/$b 2800; done; done
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
