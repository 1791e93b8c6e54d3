# Session 14, call 9: calls 4-5's setting with twice the batch (micro-batch 16 x 1024 tokens, LR 3e-4, 8 M bytes of
# text: 500 steps = one epoch, no token seen twice), seeds 1-3: does a larger batch bring the same-seed runs close
# enough for the per-seed bound to be testable?
set -u
source bench/gpu_env.sh
mid="small --set layers=12 --set d_model=768 --set heads=6 --set kv_heads=2 --set head_dim=128 --set ffn=2048 --seq 1024"
for seed in 1 2 3; do for p in "bf16" "bf16 --deterministic" "fp8" "fp8 --fp8-recipe delayed" \
    "fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention"; do
  carry/trainbench train --model $mid --micro-batch 16 --lr 3e-4 --steps 500 --warmup-steps 5 --data carry/text-bytes.u16 \
    --precision $p --no-op-profile --seed $seed --out "$OUT/results/accbig-s$seed-text-${p// /_}" | grep -E "^ +loss" |
    sed "s/^/s$seed $p: /"
done; done
python3 bench/accuracy_table.py "$OUT/results" --tag accbig
tar czf "$OUT/results-call9.tgz" -C "$OUT" results && rm -rf "$OUT/results"
