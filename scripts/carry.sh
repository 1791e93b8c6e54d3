#!/usr/bin/env bash
# carry.sh: copies what the GPU machine needs from a build here into carry/ (git-ignored): the
# trainbench binary, the labs, the GPU test binaries (CPU tests run here) and a real-text token file ($TEXT_BYTES bytes,
# default 4 M). Usage: [TEXT_BYTES=N] scripts/carry.sh [build dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rm -rf carry && mkdir -p carry/tests
cp "$build/trainbench" carry/
cp "$build/bench/lab/"*_lab carry/ 2>/dev/null || true
find "$build/tests" -maxdepth 1 -type f \( -name '*_gpu_test' -o -name '*_multigpu_test' \) -exec cp {} carry/tests/ \;
strip carry/trainbench carry/tests/* 2>/dev/null || true
python3 bench/make_text_tokens.py carry/text-bytes.u16 --max-bytes "${TEXT_BYTES:-4000000}" >/dev/null
du -sh carry
