set -u
bench/parallel_acceptance.sh fp8delayed > $OUT/fp8d.log 2>&1; grep -E "^### |max rel|exit [1-9]" $OUT/fp8d.log
carry/trainbench train --model llama3.1-8b --layers 4 --seq 8192 --gpus 2 --global-batch 2 --steps 15 --warmup-steps 3 --no-op-profile --out $OUT/dp > $OUT/dp.log 2>&1; echo "dp rc $?"; grep -E "summary|power" $OUT/dp.log
carry/trainbench report $OUT/dp --format md -o $OUT/report.md; echo "report rc $?"; grep -i -A7 "per rank" $OUT/report.md | head -14
rm -rf $OUT/results
