# gpu_env.sh: sourced on the GPU machine before running carried binaries.
# Prefer the PyTorch environment's cuDNN and NCCL (newer than the system's, and what we compiled against).
PYLIBS=$(python3 - <<'PY' 2>/dev/null
import importlib
paths = []
for name in ("nvidia.cudnn", "nvidia.nccl", "nvidia.cublas"):
    try:
        m = importlib.import_module(name)
        paths.append(list(m.__path__)[0] + "/lib")
    except Exception:
        pass
print(":".join(paths))
PY
)
export LD_LIBRARY_PATH="${PYLIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TRAINBENCH_REFERENCES=${TRAINBENCH_REFERENCES:-$PWD/references}
# scripts/carry.sh with PACK=1 carries one xz archive: unpack it once (python's tarfile: no xz tool needed).
if [ -f carry/bins.tar.xz ] && [ ! -e carry/trainbench ]; then
  python3 -c "import tarfile; tarfile.open('carry/bins.tar.xz').extractall('carry')"
fi
