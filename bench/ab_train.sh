#!/usr/bin/env bash
# ab_train.sh: this build's trainbench against an earlier one on the same GPU in one run (run there from the
# repository root, with carry/ from `PREV=OLD_BINARY scripts/carry.sh`): `train` with the same arguments, the builds
# alternating N times (prev first), optionally the torch peer before and after. Per run: the step median (20 steps
# after 5 of warm-up; the step time under a power limit drifts with the GPU's temperature, hence alternating) and a
# hash of the logged losses, learning rates and gradient norms (equal hashes: the builds compute the same numbers, where
# the run is deterministic). Then each build's median of medians, new / prev, and against the peer's mean.
# Usage: bench/ab_train.sh [-n N] [--peer "TORCH_TRAIN ARGS"] -- TRAIN ARGS...
#   e.g. bench/ab_train.sh -n 3 --peer "--model llama3.1-8b --layers 8 --seq 8192 --state bf16" -- \
#          --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-recipe delayed --fp8-lm-head
# Logs under $OUT (default /tmp/tb-out): ab-{new,prev}-I.log, peer-{1,2}.json.
set -uo pipefail
OUT=${OUT:-/tmp/tb-out}
n=3 peer_args=""
while [ $# -gt 0 ]; do
  case $1 in
    -n) n=$2; shift 2 ;;
    --peer) peer_args=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "ab_train.sh: unknown option $1 (usage: [-n N] [--peer ARGS] -- TRAIN ARGS)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "ab_train.sh: no train arguments after --" >&2; exit 2; }
source bench/gpu_env.sh  # (unpacks carry/bins.tar.xz)
for b in carry/trainbench carry/trainbench-prev; do
  [ -x $b ] || { echo "ab_train.sh: $b missing: carry it with PREV=OLD_BINARY scripts/carry.sh" >&2; exit 2; }
done
mkdir -p "$OUT"
peer() {
  [ -n "$peer_args" ] || return 0
  python3 bench/peers/torch_train.py --steps 20 --warmup 5 $peer_args > "$OUT/peer-$1.json" 2> "$OUT/peer-$1.err" ||
    { echo "ab_train.sh: the peer failed (see $OUT/peer-$1.err)" >&2; return 1; }
  python3 -c "import json,sys; print('peer %.2f ms' % json.load(open(sys.argv[1]))['step_ms']['median'])" \
    "$OUT/peer-$1.json"
}
{
  peer 1
  for i in $(seq 1 "$n"); do
    for b in prev new; do
      bin=carry/trainbench; [ $b = prev ] && bin=carry/trainbench-prev
      log="$OUT/ab-$b-$i.log"
      $bin train "$@" --steps 25 --warmup-steps 5 --no-op-profile --out "$OUT/results-ab/$b-$i" > "$log" 2>&1 ||
        { echo "ab_train.sh: $bin failed (see $log)" >&2; exit 1; }
      ms=$(grep -oE '^summary: step_s median [0-9.]+' "$log" | grep -oE '[0-9.]+$')
      hash=$(grep -oE 'loss [0-9.]+ \| lr [0-9.e-]+ \| grad_norm [0-9.]+' "$log" | md5sum | cut -c1-12)
      echo "$b $i $(python3 -c "print('%.2f' % (1e3 * $ms))") ms losses $hash"
    done
  done
  peer 2
} | tee "$OUT/ab.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
rm -rf "$OUT/results-ab"
python3 - "$OUT/ab.txt" <<'PY'
import statistics, sys
runs = {"new": [], "prev": []}
hashes, peers = set(), []
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] in runs:
        runs[f[0]].append(float(f[2]))
        hashes.add(f[5])
    elif f[0] == "peer":
        peers.append(float(f[1]))
new, prev = statistics.median(runs["new"]), statistics.median(runs["prev"])
print(f"median step: new {new:.2f} ms, prev {prev:.2f} ms; new / prev time {new / prev:.4f} ({new - prev:+.2f} ms)")
if peers:
    p = statistics.mean(peers)
    print(f"peer {p:.2f} ms (mean of {len(peers)}): new {p / new:.3f}x ({p / max(runs['new']):.3f}-{p / min(runs['new']):.3f}), "
          f"prev {p / prev:.3f}x ({p / max(runs['prev']):.3f}-{p / min(runs['prev']):.3f})")
print("losses: " + ("the same in every run" if len(hashes) == 1 else f"{len(hashes)} different hashes (see the runs)"))
PY
