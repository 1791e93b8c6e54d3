#!/usr/bin/env bash
# main-job.sh: the README's main job. GPUs present: the system check (`trainbench check`);
# no GPU: `trainbench info` (the CPU demo recipe replaces it once recipes exist).
set -uo pipefail
tb=${1:-build/trainbench}
count=$("$tb" info --json 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["system"]["gpus"]))' 2>/dev/null || echo 0)
if [ "${count:-0}" -gt 0 ]; then
  exec "$tb" check
fi
echo "main job: no GPU visible here, so it shows what trainbench sees (trainbench info);"
echo "on a GPU node it runs the system check (trainbench check)."
echo
exec "$tb" info
