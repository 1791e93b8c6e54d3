#!/usr/bin/env bash
# moe_acceptance.sh: the Mixture-of-Experts GPU acceptance in one run (on the GPU machine from the repository root,
# with carry/ from scripts/carry.sh): the MoE GPU tests, then trainbench and its PyTorch peer (bench/peers/torch_moe.py:
# torch.compile, torch._grouped_mm, cuDNN SDPA, fused AdamW, bf16 state) one after the other on the same GPU, with
# learned and with balanced routing, at:
#   mixtral: Mixtral 8x7B shapes, 4 layers, seq 4096, micro-batch 1
#   grok:    Grok-1 shapes (d_model 6144, 48 / 8 heads, 8 experts of 32768, top 2, vocab 128256), 1 layer, seq 4096
#   dense:   the dense model of the same shapes as mixtral with the expert MLP folded into one of width top_k x ffn
#            (what "MoE TFLOP/s against dense TFLOP/s" compares)
#   fp8:     mixtral in FP8 (delayed scaling with the FP8 LM head; current scaling), against mixtral's BF16 run
#   split:   mixtral and grok (learned) with trainbench's exact fp32 master weights (--master split) instead
#   ga16:    mixtral (BF16 and FP8) and its dense model at global batch 16 (16 micro-batches a step, as recipes
#            accumulate): the optimizer's pass over the experts' weights amortized, what the MoE / dense TFLOP/s and
#            the FP8 / BF16 ratios compare
# trainbench runs with the peer's optimizer state: bf16 weights, moments and gradients (--master none --moments bf16
# --grads bf16: AdamW on bf16 parameters, as the peer's fused AdamW); MASTER=split keeps fp32 master weights.
#   tests:   the MoE, grouped GEMM, MLA and bf16-state AdamW GPU tests;  lab: carry/grouped_gemm_lab $LAB_ARGS (its README)
# Logs and JSONL to $OUT. Usage: bench/moe_acceptance.sh [tests|mixtral|grok|dense|fp8|split|ga16|lab]...  (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
OUT=${OUT:-/tmp/moe-acceptance}
mkdir -p "$OUT"
TB=${TB:-carry/trainbench}  # TB=carry/trainbench-prev: the build before, for an A/B
STEPS=${STEPS:-30}
ROUTINGS=${ROUTINGS:-learned balanced}            # the routings trainbench runs
PEER_ROUTINGS=${PEER_ROUTINGS:-$ROUTINGS}          # and of those, the ones the peer also runs
WARMUP=${WARMUP:-10}
STATE="--moments bf16 --grads bf16 --master ${MASTER:-none}"
GROK="--set d_model=6144 --set heads=48 --set kv_heads=8 --set head_dim=128 --set ffn=32768 --set vocab=128256
      --set rope_theta=500000 --set rope_scaling=on"
modes=${*:-tests mixtral grok dense fp8 split ga16 lab}

tb() {  # name, args...: a trainbench run, its summary on stdout
  local name=$1
  shift
  $TB train --steps "$STEPS" --warmup-steps "$WARMUP" $STATE --out "$OUT/tb-$name" "$@" >"$OUT/tb-$name.log" 2>&1
  echo "tb $name: $(grep -E '^summary' "$OUT/tb-$name.log" || tail -2 "$OUT/tb-$name.log")"
  grep -E '^ +moe:' "$OUT/tb-$name.log"
}
peer() {  # name, args...
  local name=$1
  shift
  python3 bench/peers/torch_moe.py --steps "$STEPS" --warmup "$WARMUP" "$@" >"$OUT/peer-$name.json" 2>"$OUT/peer-$name.log"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('peer', sys.argv[2], 'step_ms', r.get('step_ms'), \
'tflops', r.get('tflops'))" "$OUT/peer-$name.json" "$name" 2>/dev/null || tail -3 "$OUT/peer-$name.log"
}

gtest() {  # binary, args...: a carried GPU test (skipped when not carried), its log in $OUT
  local t=$1
  shift
  [ -x "carry/tests/$t" ] || { echo "$t: not carried"; return; }
  timeout 300 "carry/tests/$t" "$@" >"$OUT/$t.log" 2>&1
  echo "$t rc=$? ($(grep -E '^\[  PASSED  \]' "$OUT/$t.log"))"
}

for mode in $modes; do
  case $mode in
    tests)  # the MoE, grouped GEMM, MLA and bf16-state AdamW GPU tests (those carried)
      gtest moe_gpu_test
      gtest grouped_gemm_gpu_test
      gtest mla_gpu_test
      gtest adamw_gpu_test --gtest_filter='*NoMaster*:*SplitMaster*'
      gtest attention_gpu_test --gtest_filter='*Mla*'
      gtest decoder_cuda_gpu_test --gtest_filter='*Moe*:*Mla*'
      gtest trainer_cuda_gpu_test --gtest_filter='*Moe*:*Mla*'
      grep -E "FAILED|Failure" "$OUT"/*_gpu_test.log | head -30
      ;;
    lab)  # carry/grouped_gemm_lab: the grouped GEMM configurations against per-expert cuBLASLt and cuBLAS grouped
      carry/grouped_gemm_lab ${LAB_ARGS:-} >"$OUT/grouped_gemm_lab.log" 2>&1; echo "grouped_gemm_lab rc=$?"
      grep -vE "^ *$" "$OUT/grouped_gemm_lab.log" | tail -60
      ;;
    mixtral)
      for routing in $ROUTINGS; do
        tb "mixtral-$routing" --model mixtral-8x7b --layers 4 --seq 4096 --micro-batch 1 --set "routing=$routing"
        if [[ " $PEER_ROUTINGS " == *" $routing "* ]]; then
          peer "mixtral-$routing" --preset mixtral-8x7b --layers 4 --seq 4096 --micro-batch 1 --routing "$routing"
        fi
      done
      ;;
    grok)
      for routing in $ROUTINGS; do
        tb "grok-$routing" --model mixtral-8x7b $GROK --layers 1 --seq 4096 --micro-batch 1 --set "routing=$routing"
        if [[ " $PEER_ROUTINGS " == *" $routing "* ]]; then
          peer "grok-$routing" --preset grok1-314b --layers 1 --seq 4096 --micro-batch 1 --routing "$routing"
        fi
      done
      ;;
    dense)
      tb dense-mixtral --model mistral-7b --layers 4 --seq 4096 --micro-batch 1 --set ffn=28672 --set rope_theta=1000000
      ;;
    ga16)
      STEPS_SAVED=$STEPS WARMUP_SAVED=$WARMUP
      STEPS=8 WARMUP=2
      for routing in $ROUTINGS; do
        tb "mixtral-ga16-$routing" --model mixtral-8x7b --layers 4 --seq 4096 --global-batch 16 --set "routing=$routing"
      done
      tb dense-ga16 --model mistral-7b --layers 4 --seq 4096 --global-batch 16 --set ffn=28672 --set rope_theta=1000000
      tb mixtral-fp8-ga16 --model mixtral-8x7b --layers 4 --seq 4096 --global-batch 16 --precision fp8 \
        --fp8-recipe delayed --fp8-lm-head
      STEPS=$STEPS_SAVED WARMUP=$WARMUP_SAVED
      ;;
    split)
      STATE="--moments bf16 --grads bf16 --master split" tb mixtral-split --model mixtral-8x7b --layers 4 --seq 4096
      STATE="--moments bf16 --grads bf16 --master split" tb grok-split --model mixtral-8x7b $GROK --layers 1 --seq 4096
      ;;
    fp8)  # FP8 experts (per-expert scaling) against BF16 at the Mixtral shapes, learned routing
      tb mixtral-fp8-delayed --model mixtral-8x7b --layers 4 --seq 4096 --micro-batch 1 --precision fp8 \
        --fp8-recipe delayed --fp8-lm-head
      tb mixtral-fp8-current --model mixtral-8x7b --layers 4 --seq 4096 --micro-batch 1 --precision fp8
      ;;
    *) echo "moe_acceptance.sh: unknown mode $mode" >&2; exit 2 ;;
  esac
done
