#!/usr/bin/env bash
# main-job.sh: the README's main job. GPUs present: the system check (`trainbench check`), then the default recipe
# (`trainbench run`: the Llama 3.1 8B proxy on one GPU, about a minute) compared with its published reference;
# no GPU: `trainbench run`, which runs the `tiny` recipe on the CPU and prints the same comparison table.
set -uo pipefail
tb=${1:-build/trainbench}
count=$("$tb" info --json 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["system"]["gpus"]))' 2>/dev/null || echo 0)
if [ "${count:-0}" -gt 0 ]; then
  "$tb" check
  check=$?
  "$tb" run
  run=$?
  exit $((check != 0 ? check : run))
fi
exec "$tb" run
