#!/usr/bin/env bash
# lora_acceptance.sh: LoRA fine-tuning's GPU acceptance in one run (on the GPU machine from the repository root, with
# carry/ from scripts/carry.sh): the LoRA GPU tests, then trainbench's LoRA step and its peers one after the other on
# the same GPU, each followed by its ratios (bench/lora_ratios.py), at:
#   tests:    carry/tests/lora_cuda_gpu_test, decoder_cuda_lora_gpu_test, trainer_lora_gpu_test and every
#             *packed*_gpu_test there (those carried)
#   llama8b:  Llama 3.1 8B shapes, 8 layers, seq 4096, micro-batch 1, r 16 (alpha 32, no dropout) on qkv, o, fc1
#             (gate|up) and down, NeMo's four linears ($TARGETS8B): trainbench against bench/peers/torch_lora.py
#             (torch.compile, cuDNN SDPA, frozen bf16 base, fused AdamW on the adapters) with bf16 and fp32 adapters
#   mistral:  Mistral 7B shapes, 8 layers, seq 2048, micro-batch 4, HF PEFT's setting (r 8, alpha 16, dropout 0.1 on
#             the seven projections q, k, v, o, gate, up, down): trainbench against bench/peers/hf_lora.py
#             (transformers + PEFT as users run them) and torch_lora.py at the same setting (TORCH_PEERS=0: HF only)
#   llama70b: Llama 2 70B shapes (llama3.1-70b with vocab 32000 and RoPE θ 10000 unscaled), 2 layers, seq 2048,
#             micro-batch 2, mistral's setting and peers
#   fp8:      Llama 3.1 70B shapes, 2 layers, seq 4096, micro-batch 1, llama8b's LoRA: trainbench with an FP8 base
#             (current and delayed scaling; delayed with the LM head in FP8 too) against its own BF16 LoRA
#   memory:   LoRA's peak memory against the full-training step at the same shape: trainbench at llama8b's and at
#             llama70b's shape, torch_lora.py against torch_train.py (bf16 state) at llama8b's
# Speed ratios are tokens/s (both sides' TFLOP/s count 2/3 of the `full` convention's training FLOPs, the DGXC
# fine-tuning count); memory ratios are peak allocated. A run that an earlier mode of the same call made is reused.
# hf_lora.py needs transformers and peft in the GPU machine's python3: wheels in carry/wheels (for its Python,
# without torch) are installed from there first when they are missing. Logs and JSONL to $OUT.
# Usage: bench/lora_acceptance.sh [tests|llama8b|mistral|llama70b|fp8|memory]...  (default: all)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=bench/gpu_env.sh
source bench/gpu_env.sh
OUT=${OUT:-/tmp/lora-acceptance}
mkdir -p "$OUT/results"
TB=${TB:-carry/trainbench}  # TB=carry/trainbench-prev (scripts/carry.sh PREV=): the build before, for an A/B
STEPS=${STEPS:-20}
TORCH_PEERS=${TORCH_PEERS:-1}  # 0: mistral and llama70b against HF PEFT only (their targets' peer)
WARMUP=${WARMUP:-5}
TARGETS8B=${TARGETS8B:-qkv,o,fc1,down}
S8=(--model llama3.1-8b --layers 8 --seq 4096 --micro-batch 1)
S70=(--model llama3.1-70b --layers 2 --seq 4096 --micro-batch 1)
MISTRAL=(--model mistral-7b --layers 8 --seq 2048 --micro-batch 4)
LLAMA2=(--model llama3.1-70b --set vocab=32000 --set rope_theta=10000 --set rope_scaling=off --layers 2 --seq 2048
        --micro-batch 2)
PEER_LLAMA2=(--model llama2-70b --layers 2 --seq 2048 --micro-batch 2)
LORA8B=(--lora-rank 16 --lora-targets "$TARGETS8B")
PEER8B=(--rank 16 --targets "$TARGETS8B")
LORAHF=(--lora-rank 8 --lora-alpha 16 --lora-dropout 0.1 --lora-targets canonical)
PEERHF=(--rank 8 --alpha 16 --dropout 0.1 --targets canonical)
modes=${*:-tests llama8b mistral llama70b fp8 memory}
declare -A ran  # the runs of this call: a later mode reuses them

tb() {  # tb NAME ARGS...: one trainbench run, results in $OUT/results/NAME, its summary on stdout
  local name=$1
  shift
  if [ -n "${ran[$name]:-}" ]; then echo "tb $name: measured above"; return; fi
  ran[$name]=1
  echo "tb $name: $*"
  $TB train --steps $((STEPS + WARMUP)) --warmup-steps "$WARMUP" --out "$OUT/results/$name" "$@" \
    >"$OUT/tb-$name.log" 2>&1
  local rc=$?
  echo "  exit $rc: $(grep -E '^summary' "$OUT/tb-$name.log" || tail -2 "$OUT/tb-$name.log")"
}
peer() {  # peer NAME SCRIPT ARGS...: one bench/peers/SCRIPT run, its JSON line in $OUT/peer-NAME.json and peers.jsonl
  local name=$1 script=$2
  shift 2
  if [ -n "${ran[$name]:-}" ]; then echo "peer $name: measured above"; return; fi
  ran[$name]=1
  echo "peer $name: $script $*"
  python3 "bench/peers/$script" --steps "$STEPS" --warmup "$WARMUP" "$@" >"$OUT/peer-$name.json" \
    2>"$OUT/peer-$name.log"
  local rc=$?
  echo "  exit $rc: $(tail -1 "$OUT/peer-$name.log")"
  cat "$OUT/peer-$name.json" >>"$OUT/peers.jsonl"
}
ratios() {  # ratios NAME OTHER...: NAME against each OTHER (bench/lora_ratios.py)
  echo "ratios:"
  python3 bench/lora_ratios.py "$OUT" "$@"
}
hf_ready() {  # whether hf_lora.py can import transformers and peft (after installing carry/wheels if needed)
  python3 -c "import transformers, peft" 2>/dev/null && return 0
  if [ -d carry/wheels ]; then
    python3 -m pip install --no-index --find-links carry/wheels transformers peft >"$OUT/pip-wheels.log" 2>&1
    python3 -c "import transformers, peft" 2>/dev/null && return 0
  fi
  echo "hf_lora.py skipped: no transformers and peft in $(command -v python3) (put wheels in carry/wheels)"
  return 1
}

{
  echo "### machine"; nvidia-smi -L
  for mode in $modes; do
    echo; echo "### $mode"
    case $mode in
      tests)
        shopt -s nullglob
        for t in carry/tests/{lora_cuda,decoder_cuda_lora,trainer_lora}_gpu_test carry/tests/*packed*_gpu_test; do
          if [ ! -x "$t" ]; then echo "$(basename "$t"): not carried"; continue; fi
          "$t" --gtest_brief=1 >"$OUT/$(basename "$t").log" 2>&1
          echo "$(basename "$t") rc=$?"
        done
        shopt -u nullglob
        grep -hE "FAILED|Failure" "$OUT"/*_gpu_test.log 2>/dev/null | head -20 ;;
      llama8b)
        tb 8b-lora "${S8[@]}" "${LORA8B[@]}"
        peer torch-8b-lora-bf16 torch_lora.py "${S8[@]}" "${PEER8B[@]}" --state bf16
        peer torch-8b-lora-fp32 torch_lora.py "${S8[@]}" "${PEER8B[@]}" --state fp32
        ratios 8b-lora torch-8b-lora-bf16 torch-8b-lora-fp32 ;;
      mistral)
        tb mistral-lora "${MISTRAL[@]}" "${LORAHF[@]}"
        if hf_ready; then peer hf-mistral-lora hf_lora.py "${MISTRAL[@]}" "${PEERHF[@]}"; fi
        [ "$TORCH_PEERS" = 0 ] || peer torch-mistral-lora torch_lora.py "${MISTRAL[@]}" "${PEERHF[@]}"
        ratios mistral-lora hf-mistral-lora torch-mistral-lora ;;
      llama70b)
        tb llama2-70b-lora "${LLAMA2[@]}" "${LORAHF[@]}"
        if hf_ready; then peer hf-llama2-70b-lora hf_lora.py "${PEER_LLAMA2[@]}" "${PEERHF[@]}"; fi
        [ "$TORCH_PEERS" = 0 ] || peer torch-llama2-70b-lora torch_lora.py "${PEER_LLAMA2[@]}" "${PEERHF[@]}"
        ratios llama2-70b-lora hf-llama2-70b-lora torch-llama2-70b-lora ;;
      fp8)
        tb 70b-lora-bf16 "${S70[@]}" "${LORA8B[@]}"
        tb 70b-lora-fp8 "${S70[@]}" "${LORA8B[@]}" --precision fp8
        tb 70b-lora-fp8-delayed "${S70[@]}" "${LORA8B[@]}" --precision fp8 --fp8-recipe delayed
        tb 70b-lora-fp8-head "${S70[@]}" "${LORA8B[@]}" --precision fp8 --fp8-recipe delayed --fp8-lm-head
        ratios 70b-lora-fp8 70b-lora-bf16
        ratios 70b-lora-fp8-delayed 70b-lora-bf16
        ratios 70b-lora-fp8-head 70b-lora-bf16 ;;
      memory)
        tb 8b-lora "${S8[@]}" "${LORA8B[@]}"
        tb 8b-full "${S8[@]}"
        tb llama2-70b-lora "${LLAMA2[@]}" "${LORAHF[@]}"
        tb llama2-70b-full "${LLAMA2[@]}"
        peer torch-8b-lora-bf16 torch_lora.py "${S8[@]}" "${PEER8B[@]}" --state bf16
        peer torch-8b-full-bf16 torch_train.py "${S8[@]}" --state bf16
        ratios 8b-lora 8b-full
        ratios llama2-70b-lora llama2-70b-full
        ratios torch-8b-lora-bf16 torch-8b-full-bf16 ;;
      *) echo "lora_acceptance.sh: unknown mode $mode" >&2; exit 2 ;;
    esac
  done
} 2>&1 | tee -a "$OUT/lora.log"
