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

command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "setup: the CUDA toolkit (nvcc) is not installed; install CUDA 13 with cuBLASLt, cuDNN 9 and NCCL" >&2
  exit 1
}
