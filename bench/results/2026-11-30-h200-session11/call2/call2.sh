set -u
nvidia-smi -L
for t in cuda_elementwise decoder_cuda trainer_cuda; do echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 2>&1 | tail -3; done
best="--precision fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention"
for b in trainbench-prev trainbench; do
  carry/$b train --model small --steps 12 --warmup-steps 2 --deterministic --precision fp8 --fp8-recipe delayed --no-op-profile --out $OUT/small-$b > $OUT/small-$b.log 2>&1
done
python3 - <<'P'
import json,glob,os
o=os.environ['OUT']
L=[json.loads(open(glob.glob(f'{o}/small-{b}/*.jsonl')[0]).readline())['loss'] for b in ('trainbench-prev','trainbench')]
print('small fp8 delayed losses max abs diff', max(abs(a-b) for a,b in zip(*L)), L[1][-1])
P
for i in 1 2; do for b in trainbench-prev trainbench; do
  carry/$b train --model llama3.1-8b --layers 8 --seq 8192 $best --steps 25 --warmup-steps 5 --out $OUT/r8-$b-$i > $OUT/r8-$b-$i.log 2>&1
  echo "$b $i: $(grep -E 'summary:|activation bwd' $OUT/r8-$b-$i.log | tr -s ' ' | head -3 | tr '\n' '|')"
done; done
for b in trainbench-prev trainbench; do
  carry/$b train --model llama3.1-70b --layers 2 --seq 8192 $best --steps 25 --warmup-steps 5 --out $OUT/r70-$b > $OUT/r70-$b.log 2>&1
  echo "$b 70B: $(grep -E 'summary:|activation bwd' $OUT/r70-$b.log | tr -s ' ' | head -3 | tr '\n' '|')"
done
carry/cast_lab 2>&1
