# Session 14, call 6: every GPU test binary on the final build (the norm backward with the next row's prefetch).
set -u
source bench/gpu_env.sh
nvidia-smi -L
for t in carry/tests/*_gpu_test; do
  echo "-- $(basename $t)"; $t --gtest_brief=1 > $OUT/$(basename $t).log 2>&1; echo "exit $?"
  grep -E "PASSED|FAILED|SKIPPED \[" $OUT/$(basename $t).log | head -3
done
