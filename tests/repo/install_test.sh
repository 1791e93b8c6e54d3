#!/usr/bin/env bash
# install_test.sh BUILD_DIR: `cmake --install` into a temporary prefix, then the installed binary, run from another
# folder with no TRAINBENCH_* variables, finds its recipes and references in <prefix>/share/trainbench: --version
# names the libraries, `list recipes` reads the installed folder, `run tiny --device cpu` measures and compares, and
# `project` works from the shipped measurements (and names them when --from is missing). A copy of the binary with
# recipes/ and references/ beside it finds those.
set -uo pipefail
build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "FAIL: $*"; exit 1; }
unset TRAINBENCH_RECIPES TRAINBENCH_REFERENCES TRAINBENCH_RUN_ID

cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 || { cat "$work/install.log"; fail "cmake --install"; }
tb=$prefix/bin/trainbench
share=$prefix/share/trainbench
for p in "$tb" "$share/recipes/tiny.toml" "$share/references/systems" "$share/references/measured/h200-recipes" \
         "$share/docs/METRICS.md" "$share/README.md" "$share/LICENSE"; do
  [ -e "$p" ] || fail "not installed: $p"
done

mkdir -p "$work/elsewhere" && cd "$work/elsewhere" || exit 1
out=$("$tb" --version 2>&1) || fail "--version: $out"
echo "$out"
for w in "trainbench" "CUDA runtime" "CUDA driver" "cuBLASLt" "cuDNN" "NCCL" "NVML"; do
  grep -q "$w" <<<"$out" || fail "--version does not name $w"
done

out=$("$tb" list recipes 2>&1) || fail "list recipes: $out"
grep -q "recipes ($share/recipes" <<<"$out" || fail "list recipes does not read $share/recipes: $(head -2 <<<"$out")"
grep -q "tiny" <<<"$out" || fail "list recipes: no tiny"

out=$("$tb" run tiny --device cpu --steps 3 --warmup-steps 1 2>&1)
rc=$?
[ $rc -le 1 ] || fail "run tiny --device cpu: exit $rc: $out"
grep -q "ours, CPU" <<<"$out" || fail "run tiny: no comparison: $out"
ls results/*/results.jsonl > /dev/null 2>&1 || fail "run tiny wrote no results/<run id>/results.jsonl here"

out=$("$tb" project llama3.1-70b --gpus 1024 --from "$share/references/measured/h200-recipes" 2>&1) ||
  fail "project --from the shipped measurements: $out"
out=$("$tb" project llama3.1-70b --gpus 1024 2>&1)
[ $? -eq 2 ] || fail "project without --from should be a usage error"
grep -q -- "--from $share/references/measured/h200-recipes" <<<"$out" || fail "project does not name the shipped folder: $out"

# a copied binary with its data beside it
mkdir -p "$work/copy" && cp "$tb" "$work/copy/" && cp -r "$share/recipes" "$share/references" "$work/copy/"
out=$("$work/copy/trainbench" list recipes 2>&1) || fail "copied binary: list recipes: $out"
grep -q "recipes ($work/copy/recipes" <<<"$out" || fail "the copied binary does not read the recipes beside it: $(head -1 <<<"$out")"
echo "install: ok"
