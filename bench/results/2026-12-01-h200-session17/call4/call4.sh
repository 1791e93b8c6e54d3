# Session 17, call 4: the optimizer with FP8 copies alone (bench/lab/adamw_lab over the 8B L8 layers' 1745 M weights,
# as [P / 4096, 4096]): adamw_lab is built with adamw_fp8_copy_kernel's __launch_bounds__(256, 5) (61-63 registers
# -> at most 51: 5 blocks per SM instead of 4), adamw_lab_lb1 with (256, 1) as in call 2 (a second build:
# cmake -DCMAKE_CUDA_FLAGS=-DTB_ADAMW_COPY_MIN_BLOCKS=1, target adamw_lab). Predicted: the fused step at the plain
# AdamW's rate over its 30 (22) bytes, ~2-3% over plain AdamW's time and ~0.5 ms under AdamW + cast apart. Then the
# 8B L8 FP8 delayed + head step with and without (op profile), and every GPU test these changes touch.
set -u
source bench/gpu_env.sh
for lab in adamw_lab adamw_lab_lb1; do echo "-- $lab 1745"; carry/$lab 1745; done
dh="--model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-recipe delayed --fp8-lm-head --steps 25 --warmup-steps 5"
for c in separate fused; do
  carry/trainbench train $dh --fp8-weight-cast $c 2>&1 | grep -E "^summary|fp8 weight casts|grad norm \+ AdamW" | sed "s/^/$c: /"
done
for t in adamw fp8 lm_head_fp8 cross_entropy decoder_cuda trainer_cuda; do
  echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 2>&1 | tail -4
done
