# Session 15: the loss curves of calls 2, 3 and 6 (bench/accuracy_curves.py), from the result archives here, and of
# session 14's calls 2 (markov and text, LR 1e-3) and 4 + 5 (text, LR 3e-4, vocabulary 512). Calls 2 and 3 here ran
# when --fp8-lm-head-grad defaulted to e4m3: their plain "+ head" runs (and "+ head + attention") are renamed to say
# so before drawing. Run from the repository root: bash bench/results/2026-12-01-h200-session15/curves.sh
set -euo pipefail
here=bench/results/2026-12-01-h200-session15
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
draw() {  # draw ARCHIVE[,ARCHIVE] TAG NAME TITLE [e4m3-head: rename the head runs]
  rm -rf "$tmp/results"; for f in ${1//,/ }; do tar xzf "$f" -C "$tmp"; done
  if [ "${5:-}" = e4m3-head ]; then
    for d in "$tmp"/results/*-fp8_--fp8-recipe_delayed_--fp8-lm-head{,_--fp8-attention}; do
      [ ! -d "$d" ] || mv "$d" "${d/--fp8-lm-head/--fp8-lm-head_--fp8-lm-head-grad_e4m3}"
    done
  fi
  python3 bench/accuracy_curves.py "$tmp/results" --tag "$2" --out "$here/curves-$3" --title "$4"
}
draw $here/call3/results-lr3e-4.tgz accmid lr3e-4-vocab128256 \
  "76 M model, vocabulary 128256, micro-batch 8, LR 3e-4, 6 seeds (session 15, call 3)" e4m3-head
draw $here/call6/results-call6.tgz acclow lr1e-4-vocab128256 \
  "76 M model, vocabulary 128256, micro-batch 8, LR 1e-4, 6 seeds (session 15, call 6)"
draw $here/call2/results-call2-acc.tgz accmid lr3e-4-vocab512 \
  "76 M model, vocabulary 512, micro-batch 8, LR 3e-4, 6 seeds (session 15, call 2)" e4m3-head
s14=bench/results/2026-12-01-h200-session14
draw $s14/call2/results-train.tgz accmid s14-lr1e-3-vocab512 \
  "76 M model, vocabulary 512, micro-batch 4, LR 1e-3, 3 seeds (session 14, call 2)"
draw $s14/call4/results-call4.tgz,$s14/call5/results-call5.tgz acccalm s14-lr3e-4-vocab512 \
  "76 M model, vocabulary 512, micro-batch 8, LR 3e-4, 6 seeds (session 14, calls 4 and 5)"
