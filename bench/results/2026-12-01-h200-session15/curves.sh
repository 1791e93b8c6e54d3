# Session 15: the loss curves of calls 2, 3 and 6 (bench/accuracy_curves.py), from the result archives here. Calls 2
# and 3 ran when --fp8-lm-head-grad defaulted to e4m3: their plain "+ head" runs (and "+ head + attention") are
# renamed to say so before drawing. Run from the repository root: bash bench/results/2026-12-01-h200-session15/curves.sh
set -euo pipefail
here=bench/results/2026-12-01-h200-session15
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
draw() {  # draw ARCHIVE TAG NAME TITLE
  rm -rf "$tmp/results"; tar xzf "$1" -C "$tmp"
  for d in "$tmp"/results/*-fp8_--fp8-recipe_delayed_--fp8-lm-head "$tmp"/results/*-fp8_--fp8-recipe_delayed_--fp8-lm-head_--fp8-attention; do
    [ "$3" = lr1e-4-vocab128256 ] || [ ! -d "$d" ] || mv "$d" "${d/--fp8-lm-head/--fp8-lm-head_--fp8-lm-head-grad_e4m3}"
  done
  python3 bench/accuracy_curves.py "$tmp/results" --tag "$2" --out "$here/curves-$3" --title "$4"
}
draw $here/call3/results-lr3e-4.tgz accmid lr3e-4-vocab128256 \
  "76 M model, vocabulary 128256, micro-batch 8, LR 3e-4, 6 seeds (session 15, call 3)"
draw $here/call6/results-call6.tgz acclow lr1e-4-vocab128256 \
  "76 M model, vocabulary 128256, micro-batch 8, LR 1e-4, 6 seeds (session 15, call 6)"
draw $here/call2/results-call2-acc.tgz accmid lr3e-4-vocab512 \
  "76 M model, vocabulary 512, micro-batch 8, LR 3e-4, 6 seeds (session 15, call 2)"
