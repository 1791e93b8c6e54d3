#!/usr/bin/env bash
# grouped_gemm_sass.sh BUILD_DIR CUDABIN_DIR: every compiled grouped GEMM kernel (one object per family and
# configuration, src/ops/CMakeLists.txt) runs on Hopper's warpgroup tensor cores: its SASS holds HGMMA (bf16 families)
# or QGMMA (fp8 families, named e4m3* / e5m2*) and not the other. cuobjdump and nvdisasm come from scripts/setup.sh
# (.deps/cudabin); without them the test is skipped (exit 77).
set -euo pipefail
build=$1
export PATH="$2/nvidia/cu13/bin:$PATH"
command -v cuobjdump >/dev/null && command -v nvdisasm >/dev/null || { echo "no cuobjdump/nvdisasm: run scripts/setup.sh"; exit 77; }
objects=("$build"/src/ops/CMakeFiles/tb_ops.dir/grouped_gemm/*.cu.o)
[ -e "${objects[0]}" ] || { echo "no grouped GEMM objects under $build: build tb_ops first" >&2; exit 1; }
fail=0
for o in "${objects[@]}"; do
  name=$(basename "$o" .cu.o)
  sass=$(cuobjdump --dump-sass "$o")
  h=$(grep -c "HGMMA\." <<<"$sass" || true)
  q=$(grep -c "QGMMA\." <<<"$sass" || true)
  case "$name" in
    grouped_gemm_e4m3* | grouped_gemm_e5m2*) ok=$([ "$q" -gt 0 ] && [ "$h" -eq 0 ] && echo yes || echo no) ;;
    *) ok=$([ "$h" -gt 0 ] && [ "$q" -eq 0 ] && echo yes || echo no) ;;
  esac
  printf '%-50s HGMMA %4d  QGMMA %4d  %s\n' "$name" "$h" "$q" "$([ "$ok" = yes ] && echo ok || echo WRONG)"
  [ "$ok" = yes ] || fail=1
done
exit $fail
