set -u
for i in 1 2; do for a in "" "--autotune"; do
  n=8b${a:+-tuned}-$i
  carry/trainbench train --model llama3.1-8b --layers 8 --seq 8192 --steps 25 --warmup-steps 5 $a --out $OUT/r/$n > $OUT/$n.log 2>&1
  echo "$n: $(grep -E 'summary:|GEMM shapes|gemm (fwd|wgrad|dgrad)|lm head|power' $OUT/$n.log | sed -E 's/ +/ /g; s/memory:.*graph/graph/' | tr '\n' '|')"
done; done
for a in "" "--autotune"; do
  n=70b${a:+-tuned}
  carry/trainbench train --model llama3.1-70b --layers 2 --seq 8192 --steps 25 --warmup-steps 5 $a --out $OUT/r/$n > $OUT/$n.log 2>&1
  echo "$n: $(grep -E 'summary:|GEMM shapes|gemm (fwd|wgrad|dgrad)|lm head|power' $OUT/$n.log | sed -E 's/ +/ /g; s/memory:.*graph/graph/' | tr '\n' '|')"
done
rm -rf $OUT/r
