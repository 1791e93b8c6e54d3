# Session 19, call 8: issue 3's criterion "step time with graph replay within 1% of the sum of kernel times", measured
# in the replayed steps themselves: the op profile's eager step runs at another clock than the replayed steps (at the
# 700 W cap its sum was 3.7% below the replayed step in call 1, 1.7% above in session 18), so it cannot say. If nsys is
# on the machine: 8B L8 BF16 (the default) traced with --cuda-graph-trace=node, each replay's kernels summed
# (call8/kernel_busy.py). Prediction: span / sum - 1 < 0.5% (a few microseconds between ~700 graph kernels), the
# step period above the span by the host's per-step work (loss read, LR update).
set -u
source bench/gpu_env.sh
NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}"
if [ -z "$NSYS" ]; then ls /usr/local/cuda*/bin 2>/dev/null | head -40; exit 0; fi
$NSYS --version
$NSYS profile -o "$OUT/bf16" --force-overwrite true --trace=cuda --cuda-graph-trace=node --sample=none \
  --cpuctxsw=none carry/trainbench train --model llama3.1-8b --layers 8 --seq 8192 --steps 12 --warmup-steps 4 \
  --no-op-profile --out "$OUT/results/bf16" > "$OUT/bf16.log" 2>&1; echo "exit $?"
grep -E "^summary|power" "$OUT/bf16.log"
$NSYS export --type sqlite --force-overwrite true -o "$OUT/bf16.sqlite" "$OUT/bf16.nsys-rep" > /dev/null 2>&1
python3 bench/results/2026-12-01-h200-session19/call8/kernel_busy.py "$OUT/bf16.sqlite"
rm -rf "$OUT/results" "$OUT/bf16.sqlite" "$OUT/bf16.nsys-rep"
