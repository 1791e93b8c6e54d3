set -u
nvidia-smi -L
for t in carry/tests/*_gpu_test; do
  echo "-- $(basename $t)"; timeout 300 $t --gtest_brief=1 > $OUT/$(basename $t).log 2>&1; rc=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? from .* ran" $OUT/$(basename $t).log | tr '\n' ' '; echo "rc $rc"
done
echo "-- run (default recipe)"
carry/trainbench run --out $OUT/run > $OUT/run.log 2>&1; echo "rc $?"
grep -E "point [0-9]|power|per GPU|ratio|llama" $OUT/run.log | head -12
rm -rf $OUT/run
