# Session 19: the loss curves of calls 1 and 6 (bench/accuracy_curves.py) from their result archives. Run from the repository
# root: bash bench/results/2026-12-01-h200-session19/curves.sh
set -euo pipefail
here=bench/results/2026-12-01-h200-session19
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
draw() {  # draw CALL LR
  rm -rf "$tmp/results"; tar xzf $here/$1/results-acc.tgz -C "$tmp"
  python3 bench/accuracy_curves.py "$tmp/results" --tag accmid --out "$here/curves-fastest-lr$2" \
    --title "76 M model, vocabulary 128256, micro-batch 8, LR $2, 6 seeds (session 19, call ${1#call})"
}
draw call1 1e-4
draw call6 3e-4
