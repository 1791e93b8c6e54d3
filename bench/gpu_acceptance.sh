#!/usr/bin/env bash
# gpu_acceptance.sh: the system check's GPU acceptance in one run (run on the GPU machine from
# the repository root, with carry/ from scripts/carry.sh): GPU tests, `check` on 1 and all GPUs, the
# micro suites and their PyTorch peers, bad-input cases. Logs and a results tarball go to $OUT.
# Usage: bench/gpu_acceptance.sh [quick|lab|full]   (quick: tests + check; lab: + kernel labs; full: everything)
set -uo pipefail
OUT=${OUT:-/tmp/tb-out}
mkdir -p "$OUT"
TB=carry/trainbench
mode=${1:-full}
source bench/gpu_env.sh
ngpu=$(nvidia-smi -L | wc -l)
log() { echo; echo "### $*"; }

{
  log "machine"; nvidia-smi -L; nvidia-smi topo -m; nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
  log "libraries"; ldd $TB | grep -E "not found|cublas|cudnn|nccl|mpi" ; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  log "info"; $TB info
  log "gpu tests"
  for t in carry/tests/*_gpu_test; do echo "-- $t"; $t --gtest_brief=1 || echo "FAILED: $t"; done
  if [ "$ngpu" -ge 2 ]; then
    for t in carry/tests/*_multigpu_test; do echo "-- $t"; $t --gtest_brief=1 || echo "FAILED: $t"; done
  fi
} 2>&1 | tee "$OUT/tests.log"

{
  log "check on 1 GPU"; $TB check --gpus 1 --out "$OUT/results/check1"; echo "exit $?"
  if [ "$ngpu" -ge 2 ]; then log "check on $ngpu GPUs"; $TB check --out "$OUT/results/check$ngpu"; echo "exit $?"; fi
  log "check without GPUs"; CUDA_VISIBLE_DEVICES= $TB check; echo "exit $?"
  log "bad input"; $TB chek; echo "exit $?"; $TB micro gemm --dtpe bf16; echo "exit $?"
  $TB micro gemm --gpus 9; echo "exit $?"; $TB micro gemm --dtype e5m2 --sizes 256; echo "exit $?"
  $TB micro membw --sizes 12Q; echo "exit $?"
} 2>&1 | tee "$OUT/check.log"

if [ "$mode" = lab ] || [ "$mode" = full ]; then
  { log "membw lab"; carry/membw_lab; } 2>&1 | tee "$OUT/lab.log"
fi

if [ "$mode" = full ]; then
  {
    log "gemm sweep"; $TB micro gemm --gpus 1 --sizes 4096,8192,16384 --out "$OUT/results/gemm"
    log "gemm 8192 on every GPU"; $TB micro gemm --sizes 8192 --out "$OUT/results/gemm-all"
    log "gemm model shapes"; $TB micro gemm --gpus 1 --dtype bf16,e4m3 --shapes llama3.1-8b,llama3.1-70b --tp 1,8 --out "$OUT/results/gemm-shapes"
    log "torch peer (gemm, copy)"; python3 bench/peers/torch_micro.py --sizes 4096,8192,16384
    CUDA_VISIBLE_DEVICES=1 python3 bench/peers/torch_micro.py --sizes 8192 --dtypes bf16,e4m3
    log "membw"; $TB micro membw --gpus 1 --out "$OUT/results/membw"
    log "links"; $TB micro links --out "$OUT/results/links"
    if [ "$ngpu" -ge 2 ]; then
      log "nccl sweep"; $TB micro nccl --sizes 8,1K,32K,1M:4G --out "$OUT/results/nccl"
      log "nccl bf16 sum, f32 max"; $TB micro nccl --ops all_reduce --dtype bf16 --sizes 1G --out "$OUT/results/nccl-bf16"
      $TB micro nccl --ops all_reduce --op max --sizes 1G --out "$OUT/results/nccl-max"
      log "torch.distributed peer"; torchrun --nproc_per_node="$ngpu" bench/peers/torch_nccl.py --sizes 64M,256M,1G,4G
    fi
  } 2>&1 | tee "$OUT/micro.log"
fi
tar czf "$OUT/results.tgz" -C "$OUT" results 2>/dev/null
rm -rf "$OUT/results"
