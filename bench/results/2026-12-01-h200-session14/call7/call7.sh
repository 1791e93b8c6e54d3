# Session 14, call 7: does the all-E4M3 format (--fp8-format e4m3: gradients in E4M3 too, 3 mantissa bits instead of
# E5M2's 2) take back what the FP8 head and FP8 attention cost at LR 1e-3 (calls 2-3)? Call 2's setting (76 M model,
# micro-batch 4, LR 1e-3, the default 4 M bytes of text), seeds 1-3; BF16 and hybrid runs are calls 2-3's.
set -u
source bench/gpu_env.sh
mid="small --set layers=12 --set d_model=768 --set heads=6 --set kv_heads=2 --set head_dim=128 --set ffn=2048 --seq 1024"
for seed in 1 2 3; do for p in "fp8 --fp8-recipe delayed --fp8-format e4m3" \
    "fp8 --fp8-recipe delayed --fp8-lm-head --fp8-format e4m3" "fp8 --fp8-recipe delayed --fp8-attention --fp8-format e4m3" \
    "fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention --fp8-format e4m3"; do
  carry/trainbench train --model $mid --micro-batch 4 --lr 1e-3 --steps 500 --warmup-steps 5 --data carry/text-bytes.u16 \
    --precision $p --no-op-profile --seed $seed --out "$OUT/results/accmid-s$seed-text-${p// /_}" | grep -E "^ +loss" |
    sed "s/^/s$seed $p: /"
done; done
tar czf "$OUT/results-call7.tgz" -C "$OUT" results && rm -rf "$OUT/results"
