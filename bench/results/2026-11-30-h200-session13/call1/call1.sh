#!/usr/bin/env bash
# call 1: upper bound of overlapping AdamW with compute (experiment build: TB_EXP_OVERLAP, patch call1.patch).
set -u
B=carry/trainbench-exp
common="--model llama3.1-8b --layers 8 --seq 8192 --steps 15 --warmup-steps 3 --no-op-profile"
fp8="--precision fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
run() {  # name mode args...
  local name=$1 mode=$2; shift 2
  echo "### $name (TB_EXP_OVERLAP=$mode)"
  TB_EXP_OVERLAP=$mode $B train $common "$@" --out $OUT/r/$name 2>&1 | grep -E "EXPERIMENT|summary|power|error|Error" 
}
run fp8-base "" $fp8
run fp8-low low $fp8
run fp8-high high $fp8
run fp8-base2 "" $fp8
run bf16-base ""
run bf16-low low
run bf16-high high
