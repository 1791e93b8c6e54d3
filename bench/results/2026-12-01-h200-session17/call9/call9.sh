# Session 17, call 9: the committed copy kernel (one row per pass, 5 blocks per SM) with bf16 moments in the step,
# which calls 2 and 4 did not profile: the 8B L8 FP8 delayed + head step separate / fused, twice each, alternating
# (op profiles). From the lab (call 4: fused 11.61 ms against 8.86 + the step's 2.46 ms of layer casts) the fused
# step may be ~0.3 ms slower here; if so, fused should not be the default with bf16 moments.
set -u
source bench/gpu_env.sh
dh="--model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-recipe delayed --fp8-lm-head --steps 25 --warmup-steps 5"
for rep in 1 2; do for c in separate fused; do
  carry/trainbench train $dh --moments bf16 --fp8-weight-cast $c 2>&1 | grep -E "^summary|fp8 weight casts|grad norm \+ AdamW" | sed "s/^/bf16 $c $rep: /"
done; done
