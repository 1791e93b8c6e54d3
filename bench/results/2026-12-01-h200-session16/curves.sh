# Session 16: the loss curves (bench/accuracy_curves.py) of calls 1 + 2 (the FP8 head's GEMM sets) and calls 3 + 4
# (stochastic rounding of its logit gradients), seeds 1-6 each, from the result archives here. Run from the repository
# root: bash bench/results/2026-12-01-h200-session16/curves.sh
set -euo pipefail
here=bench/results/2026-12-01-h200-session16
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
draw() {  # draw CALL CALL NAME TITLE
  rm -rf "$tmp/results"; tar xzf $here/$1/results-acc.tgz -C "$tmp"; tar xzf $here/$2/results-acc.tgz -C "$tmp"
  python3 bench/accuracy_curves.py "$tmp/results" --tag accmid --out "$here/curves-$3" --title "$4"
}
draw call1 call2 head-gemms "76 M model, vocabulary 128256, micro-batch 8, LR 3e-4, 6 seeds (session 16, calls 1 and 2)"
draw call3 call4 head-rounding "76 M model, vocabulary 128256, micro-batch 8, LR 3e-4, 6 seeds (session 16, calls 3 and 4)"
