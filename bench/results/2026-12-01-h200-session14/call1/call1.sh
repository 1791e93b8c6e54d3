# Session 14, call 1: the norm backward that loads the next row while it reduces this one (trainbench) against the
# previous build (trainbench-prev): GPU tests, bit-for-bit losses, then the step and its "norm bwd" op time, alternating.
set -u
source bench/gpu_env.sh
nvidia-smi -L
for t in cuda_elementwise decoder_cuda trainer_cuda; do echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 2>&1 | tail -3; done
for m in "small" "small --precision fp8 --fp8-recipe delayed" "small-gpt"; do
  for b in trainbench-prev trainbench; do
    carry/$b train --model $m --steps 12 --warmup-steps 2 --deterministic --no-op-profile --out $OUT/small-$b > $OUT/small-$b.log 2>&1
  done
  M="$m" python3 - <<'P'
import json,glob,os
o=os.environ['OUT']
L=[json.loads(open(glob.glob(f'{o}/small-{b}/*.jsonl')[0]).readline())['loss'] for b in ('trainbench-prev','trainbench')]
print(os.environ['M'], ': losses max abs diff prev vs new', max(abs(a-b) for a,b in zip(*L)), 'last', L[1][-1])
P
  rm -rf $OUT/small-*
done
best="--precision fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention"
for i in 1 2; do for b in trainbench-prev trainbench; do for p in bf16 best; do
  args=""; [ $p = best ] && args=$best
  carry/$b train --model llama3.1-8b --layers 8 --seq 8192 $args --steps 25 --warmup-steps 5 --out $OUT/r8 > $OUT/r8.log 2>&1
  echo "8B $p $b $i: $(grep -E 'summary:|norm bwd|norm fwd' $OUT/r8.log | tr -s ' ' | head -3 | tr '\n' '|')"
  rm -rf $OUT/r8
done; done; done
for b in trainbench-prev trainbench; do
  carry/$b train --model llama3.1-70b --layers 2 --seq 8192 --steps 25 --warmup-steps 5 --out $OUT/r70 > $OUT/r70-$b.log 2>&1
  echo "70B bf16 $b: $(grep -E 'summary:|norm bwd|norm fwd' $OUT/r70-$b.log | tr -s ' ' | head -3 | tr '\n' '|')"
  rm -rf $OUT/r70
done
