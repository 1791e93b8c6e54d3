#!/usr/bin/env bash
# setup.sh: installs what trainbench needs to build and test, only what is missing (idempotent).
# Debian packages through apt-get (as root, or with sudo); PyPI packages pinned, into .deps/python.
# The CUDA toolkit (nvcc, cuBLASLt, cuDNN, NCCL) is expected to be installed already.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  cmake ninja-build g++ ccache git python3-pip
  libgtest-dev libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libopenmpi-dev openmpi-bin
  python3-yaml slurm-wlm munge    # launch tests: manifests read back; a one-node Slurm (tests/launch/slurm_local.sh)
  gnuplot-nox fonts-dejavu-core   # `trainbench report` charts (pngcairo)
  chromium                        # tests/report/report_chromium_test.cpp opens the HTML report headless
)
# name==version, installed with --no-deps into .deps/python (header-only C/C++ wheels and test tools)
PYPI_PACKAGES=(
  nvidia-nvml-dev==13.0.87          # nvml.h; NVML itself is dlopen'ed at run time
  nvidia-cudnn-frontend==1.16.0     # cudnn-frontend C++ headers (include/ inside the wheel)
)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

prefix=.deps/python
mkdir -p "$prefix"
for spec in "${PYPI_PACKAGES[@]}"; do
  stamp="$prefix/.installed-${spec//[=]/-}"
  [ -f "$stamp" ] && continue
  echo "setup: installing $spec from PyPI into $prefix"
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --upgrade --target "$prefix" "$spec"
  touch "$stamp"
done

# install_into DIR PACKAGE...: pinned PyPI packages (no dependencies resolved) into a folder of their own, replaced
# whole when the pins change (a stamp per set of pins).
install_into() {
  local dir=$1; shift
  local stamp="$dir/.installed-$(echo "$*" | md5sum | cut -c1-12)"
  [ -f "$stamp" ] && return 0
  echo "setup: installing $1$([ $# -gt 1 ] && echo " and $(($# - 1)) pinned dependencies") from PyPI into $dir"
  rm -rf "$dir"
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$dir" "$@"
  touch "$stamp"
}

# CUPTI's headers and library (CUDA 13.0's), in a folder of its own (pip --target --upgrade replaces a top-level
# folder, and nvidia/ is nvidia-nvml-dev's too): bench/lab/kernel_trace, a CUPTI injection library.
install_into .deps/cupti nvidia-cuda-cupti==13.0.85

# CUTLASS's C++ headers (include/cutlass, include/cute under cutlass_library/source/ in the wheel), in a folder of
# their own: ops/cuda's grouped GEMMs (CUTLASS 3.x sm90 pointer-array kernels).
install_into .deps/cutlass nvidia-cutlass==4.2.0.0

# cuobjdump and nvdisasm (the toolkit here has neither): tests/ops/grouped_gemm_sass.sh reads the grouped GEMM
# kernels' SASS for HGMMA / QGMMA.
install_into .deps/cudabin nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.51

# safetensors (the reference reader and writer of the checkpoint format, train/safetensors.h) and pyarrow (parquet), in a
# folder of their own: tests/train/safetensors_python.py checks that each side reads what the other writes;
# scripts/convert_mlperf_govreport.py reads the MLPerf Llama 2 70B LoRA parquet files (tests/train/convert_govreport.py).
install_into .deps/pytools safetensors==0.8.0 pyarrow==26.0.1

# kubernetes-validate (the Kubernetes OpenAPI schemas) and its dependencies, pinned: the launch tests validate
# rendered manifests with it (tests/launch/k8s_check.py).
install_into .deps/kubeval \
  kubernetes-validate==1.37.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 \
  rpds-py==2026.9.1 attrs==26.1.0 importlib-resources==7.1.0 packaging==26.4 typing-extensions==4.16.0 PyYAML==6.0.4

# mlperf-logging (MLCommons' compliance checker and result summarizer), without its dependencies: the compliance
# checker needs only PyYAML (python3-yaml above). `trainbench mlperf summarize` and tests/mlperf run it with
# PYTHONPATH=.deps/mlperf.
install_into .deps/mlperf mlperf-logging==4.1.68

command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "setup: the CUDA toolkit (nvcc) is not installed; install CUDA 13 with cuBLASLt, cuDNN 9 and NCCL" >&2
  exit 1
}
