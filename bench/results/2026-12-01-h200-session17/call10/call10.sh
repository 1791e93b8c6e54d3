# Session 17, call 10: `--fp8-weight-cast auto` (the default now: fused with fp32 moments only, after call 9):
# trainer_cuda's FP8 tests (the copies test checks auto with both moment types) and one default 8B L8 FP8 delayed +
# head run with each moment type, to show what the record says ran.
set -u
source bench/gpu_env.sh
carry/tests/trainer_cuda_gpu_test --gtest_filter='*Fp8*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure|expected|Which" | head
for mom in f32 bf16; do
  carry/trainbench train --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-recipe delayed --fp8-lm-head \
    --moments $mom --steps 8 --warmup-steps 3 --no-op-profile --out "$OUT/r-$mom" > /dev/null 2>&1
  grep -ho '"weight_cast":"[a-z]*"' "$OUT"/r-$mom/*.jsonl | sort -u | sed "s/^/moments $mom: /"
done
