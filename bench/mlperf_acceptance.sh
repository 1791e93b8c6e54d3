#!/usr/bin/env bash
# mlperf_acceptance.sh: the MLPerf Llama 2 70B LoRA time to train projected from one GPU, in one run (on the GPU
# machine from the repository root, with carry/ from scripts/carry.sh; or TB=build/trainbench on a workstation):
#   1. the one-GPU proxy of the recipe mlperf-llama2-70b-lora (Llama 2 70B, seq 8192, LoRA r 16 alpha 32 dropout 0.1
#      on qkv and o, FP8 base): twice, as the shard of NVIDIA's 8 x H100 layout (TP4: `run`'s default, --ref-gpus 8)
#      and as the shard of its 8 x H200 layout (TP1 CP2: --reference-gpu H200), each a trainbench.result.v1 record
#      (tokens/s per GPU of the full layout, per-layer time) in $OUT/results/<name>;
#   2. `trainbench project mlperf-llama2-70b-lora --gpus 8 --system h200 --from <both> --ttt`: the step at 8 GPUs
#      (NVIDIA's H200 layout), samples/s = tokens/s per GPU x 8 / 8192, and the time to train = samples to the target
#      (the reference convergence point at GBS 8, 3456 samples) / samples/s + 6 evaluations of 173 samples, beside
#      NVIDIA's published 8 x H200 row (MLPerf v4.1: 24.116 min) with the error; --json beside it in $OUT;
#   3. the same projection to 8 x H100 beside NVIDIA's 8 x H100 row (27.928 min).
# A failed proxy does not stop the script: the projection uses the records there are. Logs and JSON to $OUT.
# Usage: [OUT=dir] [TB=path] [PRECISION=fp8|bf16] [DATA=dir/train.index] bench/mlperf_acceptance.sh
#   DATA: the converted MLPerf train set (scripts/convert_mlperf_govreport.py) instead of synthetic GovReport lengths
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if [ -f bench/gpu_env.sh ] && [ -z "${TB:-}" ]; then
  # shellcheck source=bench/gpu_env.sh
  source bench/gpu_env.sh
fi
OUT=${OUT:-/tmp/mlperf-acceptance}
TB=${TB:-carry/trainbench}
PRECISION=${PRECISION:-fp8}
RECIPE=mlperf-llama2-70b-lora
DATA_ARGS=()
[ -n "${DATA:-}" ] && DATA_ARGS=(--data "$DATA")
mkdir -p "$OUT/results"

proxy() {  # proxy NAME ARGS...: one `trainbench run` of the recipe's one-GPU proxy into $OUT/results/NAME
  local name=$1
  shift
  echo "run $name: $TB run $RECIPE --precision $PRECISION ${DATA_ARGS[*]} $*"
  "$TB" run "$RECIPE" --precision "$PRECISION" "${DATA_ARGS[@]}" -o "$OUT/results/$name" "$@" >"$OUT/run-$name.log" 2>&1
  echo "  exit $?: $(grep -E 'tokens/s' "$OUT/run-$name.log" | tail -1)"
}
proxy h100-layout --ref-gpus 8
proxy h200-layout --ref-gpus 8 --reference-gpu H200

from=()
for d in "$OUT"/results/*/; do [ -s "$d/results.jsonl" ] && from+=(--from "$d"); done
[ ${#from[@]} -gt 0 ] || { echo "mlperf_acceptance: no proxy record in $OUT/results" >&2; exit 1; }
rc=0
for sys in h200 h100; do
  echo "project $RECIPE --gpus 8 --system $sys --ttt"
  "$TB" project "$RECIPE" --gpus 8 --system "$sys" --precision "$PRECISION" "${from[@]}" --ttt | tee "$OUT/ttt-$sys.txt" ||
    rc=1
  "$TB" project "$RECIPE" --gpus 8 --system "$sys" --precision "$PRECISION" "${from[@]}" --ttt --json \
    >"$OUT/ttt-$sys.json" || rc=1
done
exit $rc
