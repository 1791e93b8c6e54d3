# Session 14, call 4: the per-seed accuracy criterion in a calmer regime than calls 2-3: the 76 M model on 8 M bytes
# of real text (bench/make_text_tokens.py --max-bytes 8000000), micro-batch 8 x 1024 tokens, LR 3e-4 (trainbench's
# default from 100 M parameters), 500 steps = 4.1 M tokens (half an epoch: no token seen twice). The BF16 run with the
# deterministic attention backward is the control (same math, other summation order).
set -u
source bench/gpu_env.sh
mid="small --set layers=12 --set d_model=768 --set heads=6 --set kv_heads=2 --set head_dim=128 --set ffn=2048 --seq 1024"
for seed in 1 2 3; do for p in "bf16" "bf16 --deterministic" "fp8" "fp8 --fp8-recipe delayed" \
    "fp8 --fp8-recipe delayed --fp8-lm-head" "fp8 --fp8-recipe delayed --fp8-attention" \
    "fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention"; do
  carry/trainbench train --model $mid --micro-batch 8 --lr 3e-4 --steps 500 --warmup-steps 5 --data carry/text-bytes.u16 \
    --precision $p --no-op-profile --seed $seed --out "$OUT/results/acccalm-s$seed-text-${p// /_}" | grep -E "^ +loss" |
    sed "s/^/s$seed $p: /"
done; done
python3 bench/accuracy_table.py "$OUT/results" --tag acccalm
tar czf "$OUT/results-call4.tgz" -C "$OUT" results && rm -rf "$OUT/results"
