# Session 14, call 3: why FP8 misses the per-seed bound on real text at the 76 M size (call 2, fp8accmid). Real text
# only, seeds 1-3. A: call 2's setting (micro-batch 4, LR 1e-3): BF16 with the deterministic attention backward (the
# same math summed in another order: how far same-seed runs drift apart by round-off alone), FP8 delayed with only the
# FP8 head, and with only FP8 attention. B: a calmer setting (micro-batch 16, LR 6e-4): BF16, BF16 deterministic, FP8
# current, FP8 delayed, FP8 delayed + head + attention.
set -u
source bench/gpu_env.sh
mid="small --set layers=12 --set d_model=768 --set heads=6 --set kv_heads=2 --set head_dim=128 --set ffn=2048 --seq 1024"
run() {  # run TAG "TRAIN ARGS" PRECISION...
  local tag=$1 args=$2; shift 2
  for seed in 1 2 3; do for p in "$@"; do
    carry/trainbench train --model $mid $args --steps 500 --warmup-steps 5 --data carry/text-bytes.u16 --precision $p \
      --no-op-profile --seed $seed --out "$OUT/results/$tag-s$seed-text-${p// /_}" | grep -E "^ +loss" | sed "s/^/$tag s$seed $p: /"
  done; done
}
run accmid "--micro-batch 4 --lr 1e-3" "bf16 --deterministic" "fp8 --fp8-recipe delayed --fp8-lm-head" \
  "fp8 --fp8-recipe delayed --fp8-attention"
run accmid16 "--micro-batch 16 --lr 6e-4" "bf16" "bf16 --deterministic" "fp8" "fp8 --fp8-recipe delayed" \
  "fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention"
python3 bench/accuracy_table.py "$OUT/results" --tag accmid16
tar czf "$OUT/results-call3.tgz" -C "$OUT" results && rm -rf "$OUT/results"
