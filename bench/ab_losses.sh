#!/usr/bin/env bash
# ab_losses.sh: this build's trainbench against an earlier one, case by case, on the same GPU (run there from the
# repository root, with carry/ from `PREV=OLD_BINARY scripts/carry.sh`): each case trains once with each build and
# compares a hash of the logged loss, lr and grad-norm lines. SAME: the two builds compute the same numbers (at the
# `small` preset a run repeats bit for bit; at 8B and up cuDNN's attention backward does not, see ab_train.sh).
# Usage: bench/ab_losses.sh [CASES]   (default bench/ab_losses_cases.txt)
# CASES lines: name | train args for both | args for the earlier build only | args for this build only
# (a flag renamed between the builds goes in the last two fields). Logs under $OUT (default /tmp/tb-out).
set -uo pipefail
OUT=${OUT:-/tmp/tb-out}
cases=${1:-bench/ab_losses_cases.txt}
source bench/gpu_env.sh  # (unpacks carry/bins.tar.xz)
for b in carry/trainbench carry/trainbench-prev; do
  [ -x $b ] || { echo "ab_losses.sh: $b missing: carry it with PREV=OLD_BINARY scripts/carry.sh" >&2; exit 2; }
done
mkdir -p "$OUT"
hash() { grep -oE 'loss [0-9.]+ \| lr [0-9.e-]+ \| grad_norm [0-9.]+' "$1" | md5sum | cut -c1-12; }
while IFS='|' read -r name both prev_only new_only; do
  name=$(echo $name)
  case $name in ''|'#'*) continue ;; esac
  carry/trainbench-prev train $both $prev_only --no-op-profile --out "$OUT/r/$name-prev" > "$OUT/$name-prev.log" 2>&1
  rp=$?
  carry/trainbench train $both $new_only --no-op-profile --out "$OUT/r/$name-new" > "$OUT/$name-new.log" 2>&1
  rn=$?
  hp=$(hash "$OUT/$name-prev.log") hn=$(hash "$OUT/$name-new.log")
  verdict=SAME
  [ "$hp" = "$hn" ] && [ $rp = 0 ] && [ $rn = 0 ] || verdict=DIFF
  echo "$name: prev $hp (rc $rp) new $hn (rc $rn) $verdict"
done < "$cases" | tee "$OUT/ab_losses.txt"
grep -q DIFF "$OUT/ab_losses.txt" && exit 1 || exit 0
