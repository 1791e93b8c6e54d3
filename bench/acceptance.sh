#!/usr/bin/env bash
# acceptance.sh: the GPU benchmarks by what they measure, with their peers, on the GPU machine (repository root,
# carry/ from scripts/carry.sh; logs and JSONL under $OUT). The figures they produce are the tables of
# bench/RESULTS.md of the same names:
#   engine:   the BF16 training step of Llama 3.1 8B (8 layers) and 70B (2 layers) against the PyTorch peer, then the
#             ratios (bench/train_acceptance.sh tests 8b 70b)
#   fp8:      the FP8 training step and its targets against BF16 and the peer (bench/train_acceptance.sh fp8srtargets)
#   parallel: `train --gpus 2` in data, tensor, pipeline and context parallel against one GPU, speed and losses
#             (bench/parallel_acceptance.sh env dpcheck tpcheck ppcheck cpcheck dp8b tp70b pp70b vp70b cp8b)
#   recipes:  the README's main job, then `trainbench run` of five recipes and `compare` (bench/train_acceptance.sh
#             recipes)
#   all:      all four, one after the other
# The system check (`check`, the micro suites, nccl-tests' and PyTorch's peers) is bench/gpu_acceptance.sh.
# Usage: bench/acceptance.sh engine|fp8|parallel|recipes|all...
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
rc=0
run() { echo "== bench/acceptance.sh: $*"; "$@" || rc=1; }
for area in "$@"; do
  case "$area" in
    engine)   run bench/train_acceptance.sh tests 8b 70b ;;
    fp8)      run bench/train_acceptance.sh fp8srtargets ;;
    parallel) run bench/parallel_acceptance.sh env dpcheck tpcheck ppcheck cpcheck dp8b tp70b pp70b vp70b cp8b ;;
    recipes)  run bench/train_acceptance.sh recipes ;;
    all)      run "$0" engine fp8 parallel recipes ;;
    *) echo "bench/acceptance.sh: unknown area '$area' (engine, fp8, parallel, recipes, all)" >&2; exit 2 ;;
  esac
done
exit $rc
