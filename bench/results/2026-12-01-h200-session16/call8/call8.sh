# Session 16, call 8: the stochastic head at LR 1e-4, where the per-seed bound can be read (session 15, call 6: the
# BF16 control within 0.93% on every seed; FP8 delayed within 1.5% on 5 of 6 seeds, + head rounding to nearest on 4).
# The same setting (76 M model, --set vocab=128256, micro-batch 8, 8 M bytes of text: TEXT_BYTES=8000000
# scripts/carry.sh; seeds 1-6): BF16, FP8 delayed, + head rounding stochastically (the default) and to nearest.
set -u
source bench/gpu_env.sh
mid="small --set layers=12 --set d_model=768 --set heads=6 --set kv_heads=2 --set head_dim=128 --set ffn=2048"
for seed in 1 2 3 4 5 6; do for p in "bf16" "fp8 --fp8-recipe delayed" "fp8 --fp8-recipe delayed --fp8-lm-head" \
    "fp8 --fp8-recipe delayed --fp8-lm-head --fp8-lm-head-rounding nearest"; do
  carry/trainbench train --model $mid --set vocab=128256 --seq 1024 --micro-batch 8 --lr 1e-4 --steps 500 \
    --warmup-steps 5 --data carry/text-bytes.u16 --precision $p --no-op-profile --seed $seed \
    --out "$OUT/results/acclow-s$seed-text-${p// /_}" | grep -E "^ +loss" | sed "s/^/s$seed $p: /"
done; done > "$OUT/call8.log" 2>&1
python3 bench/accuracy_table.py "$OUT/results" --tag acclow | tee -a "$OUT/call8.log"
tar czf "$OUT/results-call8.tgz" -C "$OUT" results && rm -rf "$OUT/results"
