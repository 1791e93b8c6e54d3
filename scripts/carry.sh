#!/usr/bin/env bash
# carry.sh: copies what the GPU machine needs from a build here into carry/ (git-ignored): the trainbench binary, the
# labs, the GPU test binaries (CPU tests run here) and a real-text token file ($TEXT_BYTES bytes, default 4 M; 0: none).
# Usage: [TEXT_BYTES=N] [TESTS="fp8 adamw ..."] [PREV=FILE] [TRACE=1] [PACK=1] scripts/carry.sh [build dir]
#   TESTS  only these GPU tests (names without _gpu_test / _multigpu_test; default all)
#   PREV   an earlier build's trainbench, carried as carry/trainbench-prev (bench/ab_train.sh runs both)
#   TRACE  the CUPTI kernel trace: carry/libkernel_trace.so and carry/cupti/libcupti.so.13 (docs/DEVELOPING.md)
#   PACK   everything in one xz archive, carry/bins.tar.xz (two builds with their tests exceed carry's 64 MiB
#          uncompressed); bench/gpu_env.sh unpacks it on the GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rm -rf carry && mkdir -p carry/tests
cp "$build/trainbench" carry/
cp "$build/bench/lab/"*_lab carry/ 2>/dev/null || true
if [ -n "${TESTS:-}" ]; then
  for t in $TESTS; do
    found=$(find "$build/tests" -maxdepth 1 -type f \( -name "${t}_gpu_test" -o -name "${t}_multigpu_test" \))
    [ -n "$found" ] || { echo "carry.sh: no GPU test named $t in $build/tests" >&2; exit 1; }
    cp $found carry/tests/
  done
else
  find "$build/tests" -maxdepth 1 -type f \( -name '*_gpu_test' -o -name '*_multigpu_test' \) -exec cp {} carry/tests/ \;
fi
if [ -n "${PREV:-}" ]; then cp "$PREV" carry/trainbench-prev; fi
if [ -n "${TRACE:-}" ]; then
  mkdir -p carry/cupti
  cp "$build/bench/lab/libkernel_trace.so" carry/
  cp .deps/cupti/nvidia/cu13/lib/libcupti.so.13 carry/cupti/
fi
strip carry/trainbench* carry/*_lab carry/tests/* 2>/dev/null || true
if [ "${TEXT_BYTES:-4000000}" != 0 ]; then
  python3 bench/make_text_tokens.py carry/text-bytes.u16 --max-bytes "${TEXT_BYTES:-4000000}" >/dev/null
fi
if [ -n "${PACK:-}" ]; then
  tar cJf bins.tar.xz -C carry . && rm -rf carry && mkdir carry && mv bins.tar.xz carry/
fi
du -sh carry
