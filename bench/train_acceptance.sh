#!/usr/bin/env bash
# train_acceptance.sh: the training engine's GPU acceptance in one run (run on the GPU machine from the
# repository root, with carry/ from scripts/carry.sh): the training GPU tests, then trainbench and its PyTorch peer
# (bench/peers/torch_train.py) on the same GPU, one after the other, at the engine's target shapes, then every run's ratios
# to the peers of its shape (bench/train_ratios.py). Logs and JSONL to $OUT.
# Usage: bench/train_acceptance.sh [tests|8b|70b|recompute|fp8...|recipes|moerecipes]...  (default: tests 8b)
# (Since 2026-12-01 `--fp8-lm-head` rounds its logit gradients stochastically unless told `--debug-fp8-lm-head-rounding
# nearest`; the results of the modes from fp8head to fp8headgradacc and of fp8best, all earlier, rounded to nearest.)
#   8b:        Llama 3.1 8B shapes, 8 layers, seq 8192, micro-batch 1: trainbench (fp32 master + moments; recompute
#              none and selective), torch bf16
#              state, torch fp32 state (AMP)
#   70b:       Llama 3.1 70B shapes, 2 layers, the same three
#   recompute: trainbench 8B L8 with --recompute full, --moments bf16, --master f32
#   fp8:       8B L8 and 70B L2 in BF16 and FP8 (current, delayed) with the torch BF16 peer at 8B; accuracy: the
#              `small` preset 500 steps in BF16 / FP8 current / FP8 delayed on the markov task and on real text
#              (carry/text-bytes.u16 from bench/make_text_tokens.py)
#   fp8acc:    the accuracy runs over seeds 1, 2, 3;  fp8run: `trainbench run` of 8B and 70B in BF16 and FP8 + compare
#   fp8more:   `trainbench run` in FP8 of 405B, Nemotron-4 15B / 340B, GPT-3 175B (+ 340B in BF16), one GPU each
#   fp8head:   the FP8 LM head (--fp8-lm-head): carry/lm_head_lab, then 8B L8 and 70B L2 in BF16, FP8 and FP8 with the
#              FP8 head (current; 8B also delayed), and the torch BF16 peer at 8B
#   fp8headacc: the accuracy runs over seeds 1, 2, 3 in BF16, FP8 and FP8 with the FP8 head
#   fp8attn:   FP8 attention (--fp8-attention): carry/attention_fp8_lab, then 8B L8 (op profile on) and 70B L2 in FP8
#              with the FP8 head, without and with FP8 attention
#   fp8attnacc: the accuracy runs over seeds 1, 2, 3 on `small-hd128` (`small` with head_dim 128, what cuDNN's FP8
#              attention takes) in BF16, FP8 and FP8 with FP8 attention (the accuracy modes take $ACC_ARGS)
#   fp8fmt:    all-E4M3 (--fp8-format e4m3) against the hybrid format: 8B L8 FP8 current, and delayed with the FP8
#              head and FP8 attention, in each format
#   fp8fmtacc: the accuracy runs over seeds 1, 2, 3 of BF16 and of FP8 current and delayed in the all-E4M3 format
#   fp8accmid: the accuracy criterion per seed at a size where it means something: a 76 M-parameter Llama-like model
#              (`small` with 12 layers, d_model 768, 6 heads of 128, 2 KV heads, ffn 2048, seq 1024), micro-batch
#              ${ACC_MB:-8}, LR ${ACC_LR:-3e-4}, seeds ${ACC_SEEDS:-1..6}, 500 steps in BF16, BF16 --deterministic (the
#              control: the same arithmetic summed in another order), FP8 current, FP8 delayed and FP8 delayed + FP8
#              head + FP8 attention; make the text with `TEXT_BYTES=8000000 scripts/carry.sh` (half an epoch at mb 8)
#   fp8headgrad: the FP8 head's logit-gradient format (--debug-fp8-lm-head-grad): 8B L8 BF16, FP8 delayed + FP8 head with
#              E4M3 and with E5M2 (the hybrid default) logit gradients, and + FP8 attention (op profile on the first
#              FP8 run); 70B L2 BF16 and FP8 delayed + head; the torch BF16 peer at 8B
#   fp8headgradacc: its accuracy per seed on the 76 M model of fp8accmid (micro-batch ${ACC_MB:-4}, LR ${ACC_LR:-1e-3},
#              seeds ${ACC_SEEDS:-1..3}; the Llama vocabulary with ACC_ARGS="--set vocab=128256"): BF16, the control,
#              FP8 delayed alone, + head in both formats, + FP8 attention
#   fp8headgemms: which of the FP8 head's GEMMs cost its accuracy (--debug-fp8-lm-head-gemms), their speed: 8B L8 BF16, FP8
#              delayed, + FP8 head (rounding to nearest) with all three GEMMs in FP8, with the backward's two (forward
#              BF16), with the forward alone (op profile on the head runs)
#   fp8headgemmsacc: their accuracy per seed on the 76 M model at the Llama vocabulary (micro-batch 8, LR 3e-4, seeds
#              ${ACC_SEEDS:-1..6}, text): BF16, FP8 delayed, + head with every non-empty set of its GEMMs in FP8
#   fp8headsr: stochastic rounding of the FP8 head's logit gradients (--debug-fp8-lm-head-rounding stochastic), its speed:
#              8B L8 FP8 delayed + head with nearest and with stochastic rounding (op profile on)
#   fp8headsracc: its accuracy per seed as fp8headgemmsacc: BF16, FP8 delayed, + head rounding to nearest, + head
#              rounding stochastically, in E5M2 and in E4M3
#   fp8srtargets: the FP8 targets with the stochastic head in one run: 8B L8 BF16, FP8 delayed + head with nearest
#              and with stochastic rounding, the latter + FP8 attention; 70B L2 BF16 and FP8 delayed + stochastic head;
#              the torch BF16 peer at 8B
#   fp8gradsr: the linear layers' gradients rounded stochastically (--debug-fp8-grad-rounding stochastic), accuracy per seed
#              as fp8headsracc at LR $ACC_LR (default 1e-4): BF16, FP8 delayed, + gradients rounded stochastically, +
#              the FP8 head (stochastic), FP8 delayed + the head
#   fp8attnmargin: whether FP8 attention's loss at LR 1e-3 (measured 2026-12-01: +14% where FP8 delayed is +5%) is
#              saturation of its delayed-scaled outputs: the 76 M model, micro-batch $ACC_MB (4), LR $ACC_LR (1e-3),
#              text, seeds $ACC_SEEDS (1 2 3): BF16, FP8 delayed, + FP8 attention, each FP8 run with --fp8-margin 0 and 2
#   fp8attnemu: where FP8 attention's cost comes from, in fp8attnmargin's setting (seeds $ACC_SEEDS, 1..6): BF16, FP8
#              delayed, + FP8 attention, + BF16 attention on E4M3-rounded q, k, v, on an E4M3-rounded O, on both
#              (--debug-fp8-attention-emulate qkv | o | qkv,o)
#   fp8fused:  AdamW writing the FP8 weight copies (--fp8-weight-cast fused; auto, the default, does with fp32
#              moments) against the cast at each step's start (separate): 8B L8 FP8 delayed + stochastic head (op
#              profiles), + FP8 attention, the latter with bf16 moments too; 70B L2 FP8 delayed + head; BF16 (also with
#              bf16 moments) and the torch BF16 peer
#   grads:     bf16 weight gradients (--grads bf16, the bf16-state peer's) against fp32: 8B L8 BF16 (op profiles) and
#              with bf16 moments, FP8 delayed + head (op profiles), + FP8 attention with bf16 moments (the fastest row);
#              70B L2 BF16 and FP8 delayed + head; the torch BF16 peer
#   gradsacc:  what bf16 weight gradients cost in accuracy: the 76 M model at the Llama vocabulary on text, LR 1e-4
#              (\$ACC_LR), seeds 1-6: BF16 and FP8 delayed + head, each with fp32 and with bf16 gradients
#   fastacc:   the accuracy of the fastest FP8 row (delayed + head + FP8 attention with the peer's state: bf16 moments
#              and gradients) in gradsacc's setting (LR \$ACC_LR, default 1e-4, seeds 1-6): BF16, BF16 with that state,
#              FP8 delayed + head, + FP8 attention, + bf16 moments and gradients
#   fp8best:   the FP8 targets in one run: 8B L8 BF16, FP8 (default), FP8 delayed + head + attention with
#              fp32 and with bf16 moments (op profile on), 70B L2 BF16 and the same FP8 pair, BF16 with bf16 moments
#              at both shapes (the FP8 / BF16 ratios and memory at the peer's moment precision), the torch BF16 peer
#   accum:     the same shapes at the recipes' gradient accumulation: global batch $GB (default 16, the micro-batches
#              per GPU of the DGXC Llama 3.1 8B FP8 recipe: global batch 16 x GPUs, data parallel over all of them):
#              trainbench 8B L8 BF16, FP8 and FP8 best, torch bf16 and fp32 state; 70B L2 BF16, FP8 best, torch bf16
#   gradbuf:   the weight gradients in the activations' memory (--grad-buffer shared, the default) against a separate
#              buffer: 8B L8 and 70B L2, BF16 and the best FP8 (delayed + head + attention) at 8B; the torch fp32-state
#              peer's memory at both shapes
#   recipes:   the README's main job (check + the default recipe), `trainbench run` of the Llama 3.1 8B, 70B and
#              405B recipes (proxies on one GPU) and `trainbench compare` over them
#   moerecipes: `trainbench run` of the Grok-1, Llama 4 Maverick and Mixtral 8x7B proxies (an expert-parallel rank of
#              each smallest layout) in BF16 and FP8, of DeepSeek-V3's in BF16, and `trainbench compare` over them
#              ($RUN_ARGS: more `run` options, e.g. --steps 40)
set -uo pipefail
OUT=${OUT:-/tmp/tb-out}
mkdir -p "$OUT"
TB=carry/trainbench
source bench/gpu_env.sh
modes=${*:-tests 8b}
STEPS=${STEPS:-20}
WARM=${WARM:-5}
# The accuracy modes' 76 M-parameter Llama-like model (fp8accmid, fp8headgradacc)
MID="small --set layers=12 --set d_model=768 --set heads=6 --set kv_heads=2 --set head_dim=128 --set ffn=2048"
S8="--model llama3.1-8b --layers 8 --seq 8192"     # the issues' shapes
S70="--model llama3.1-70b --layers 2 --seq 8192"
DH="--precision fp8 --fp8-recipe delayed --fp8-lm-head"  # FP8 delayed with the FP8 LM head
log() { echo; echo "### $*"; }

ours() {  # ours NAME ARGS...: one trainbench train run, results in $OUT/results/NAME
  local name=$1; shift
  log "trainbench $name: $*"
  $TB train --steps $((STEPS + WARM)) --warmup-steps "$WARM" --out "$OUT/results/$name" "$@"; echo "exit $?"
}
peer() {  # peer NAME ARGS...: one torch_train.py run, its JSON line appended to $OUT/peers.jsonl
  local name=$1; shift
  log "torch $name: $*"
  python3 bench/peers/torch_train.py --steps "$STEPS" --warmup "$WARM" "$@" > "$OUT/peer-$name.json"
  echo "exit $?"; cat "$OUT/peer-$name.json" >> "$OUT/peers.jsonl"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('torch', sys.argv[2], 'tokens/s %.0f' % d['tokens_per_s'], 'TFLOP/s %.1f' % d['tflops'], 'peak alloc %.2f GiB' % d['max_memory_allocated_gib'], 'reserved %.2f GiB' % d['max_memory_reserved_gib'], 'sdpa', d['sdpa'])" "$OUT/peer-$name.json" "$name"
}

accuracy() {  # accuracy TAG "MODEL [ARGS]" PRECISION...: 500 steps of each precision, seeds 1 2 3 (or $ACC_SEEDS),
              # markov and real text (or $ACC_DATA), results in $OUT/results/TAG-sSEED-DATA-PRECISION (extra train
              # options in $ACC_ARGS, e.g. --lr 1e-3); the JSONL keeps every loss; then bench/accuracy_table.py's
              # per-seed table
  local tag=$1 model=$2; shift 2
  for seed in ${ACC_SEEDS:-1 2 3}; do
    for data in ${ACC_DATA:-markov carry/text-bytes.u16}; do
      for p in "$@"; do
        echo "-- seed $seed $(basename $data) $p"
        $TB train --model $model --steps 500 --warmup-steps 5 --data $data --precision $p --no-op-profile \
          --seed $seed ${ACC_ARGS:-} --out "$OUT/results/$tag-s$seed-$(basename $data)-${p// /_}" | grep -E "^ +loss"
      done
    done
  done
  python3 bench/accuracy_table.py "$OUT/results" --tag "$tag"; echo "exit $?"
}

llama_vocab_acc() {  # llama_vocab_acc PRECISION...: accuracy of the 76 M model at the Llama vocabulary on text
                     # (or $ACC_DATA), micro-batch 8, LR $ACC_LR (default 3e-4), seeds $ACC_SEEDS (default 1..6):
                     # the FP8 head's setting
  ACC_DATA=${ACC_DATA:-carry/text-bytes.u16} ACC_SEEDS=${ACC_SEEDS:-1 2 3 4 5 6} ACC_ARGS="--seq 1024 --micro-batch 8 \
    --lr ${ACC_LR:-3e-4} --set vocab=128256 ${ACC_ARGS:-}" accuracy accmid "$MID" "$@"
}

{
  log "machine"; nvidia-smi -L; nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
  for mode in $modes; do
    case $mode in
      tests)
        for t in ${TESTS:-fill decoder_cuda trainer_cuda adamw cross_entropy}; do
          echo "-- $t"; carry/tests/${t}_gpu_test --gtest_brief=1 || echo "FAILED: $t"
        done ;;
      8b)
        ours 8b-L8 --model llama3.1-8b --layers 8 --seq 8192
        ours 8b-L8-selective --model llama3.1-8b --layers 8 --seq 8192 --recompute selective
        peer 8b-L8-bf16 --model llama3.1-8b --layers 8 --seq 8192 --state bf16
        peer 8b-L8-fp32 --model llama3.1-8b --layers 8 --seq 8192 --state fp32 ;;
      70b)
        ours 70b-L2 --model llama3.1-70b --layers 2 --seq 8192
        peer 70b-L2-bf16 --model llama3.1-70b --layers 2 --seq 8192 --state bf16
        peer 70b-L2-fp32 --model llama3.1-70b --layers 2 --seq 8192 --state fp32 ;;
      recompute)
        ours 8b-L8-full --model llama3.1-8b --layers 8 --seq 8192 --recompute full --no-op-profile
        ours 8b-L8-bf16-moments --model llama3.1-8b --layers 8 --seq 8192 --moments bf16 --no-op-profile
        ours 8b-L8-f32-master --model llama3.1-8b --layers 8 --seq 8192 --master f32 --no-op-profile ;;
      fp8)
        ours 8b-L8-bf16 --model llama3.1-8b --layers 8 --seq 8192 --no-op-profile
        ours 8b-L8-fp8 --model llama3.1-8b --layers 8 --seq 8192 --precision fp8
        ours 8b-L8-fp8-delayed --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-recipe delayed --no-op-profile
        ours 70b-L2-bf16 --model llama3.1-70b --layers 2 --seq 8192 --no-op-profile
        ours 70b-L2-fp8 --model llama3.1-70b --layers 2 --seq 8192 --precision fp8 --no-op-profile
        peer 8b-L8-bf16 --model llama3.1-8b --layers 8 --seq 8192 --state bf16
        for data in markov carry/text-bytes.u16; do
          for p in "bf16" "fp8" "fp8 --fp8-recipe delayed"; do
            log "accuracy $data $p"
            $TB train --model small --steps 500 --warmup-steps 5 --data $data --precision $p --no-op-profile \
              --out "$OUT/results/acc-$(basename $data)-${p// /_}" | grep -E "^step (1|100|200|300|400|500)/|^summary|^ +loss"
          done
        done ;;
      fp8acc)
        accuracy acc small "bf16" "fp8" "fp8 --fp8-recipe delayed" ;;
      fp8accmid)
        ACC_SEEDS=${ACC_SEEDS:-1 2 3 4 5 6} ACC_ARGS="--seq 1024 --micro-batch ${ACC_MB:-8} --lr ${ACC_LR:-3e-4} \
          ${ACC_ARGS:-}" accuracy accmid "$MID" "bf16" "bf16 --deterministic" "fp8" "fp8 --fp8-recipe delayed" \
          "fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention" ;;
      fp8headgrad)
        dh="--precision fp8 --fp8-recipe delayed --fp8-lm-head"
        ours 8b-L8-bf16 --model llama3.1-8b --layers 8 --seq 8192 --no-op-profile
        ours 8b-L8-fp8-delayed-head-e4m3 --model llama3.1-8b --layers 8 --seq 8192 $dh --debug-fp8-lm-head-grad e4m3
        ours 8b-L8-fp8-delayed-head-e5m2 --model llama3.1-8b --layers 8 --seq 8192 $dh --no-op-profile
        ours 8b-L8-fp8-delayed-head-attn --model llama3.1-8b --layers 8 --seq 8192 $dh --fp8-attention --no-op-profile
        ours 70b-L2-bf16 --model llama3.1-70b --layers 2 --seq 8192 --no-op-profile
        ours 70b-L2-fp8-delayed-head --model llama3.1-70b --layers 2 --seq 8192 $dh --no-op-profile
        peer 8b-L8-bf16 --model llama3.1-8b --layers 8 --seq 8192 --state bf16 ;;
      fp8headgradacc)
        dh="fp8 --fp8-recipe delayed --fp8-lm-head"
        ACC_DATA=${ACC_DATA:-carry/text-bytes.u16} ACC_ARGS="--seq 1024 --micro-batch ${ACC_MB:-4} \
          --lr ${ACC_LR:-1e-3} ${ACC_ARGS:-}" accuracy accmid "$MID" "bf16" "bf16 --deterministic" \
          "fp8 --fp8-recipe delayed" "$dh" "$dh --debug-fp8-lm-head-grad e4m3" "$dh --fp8-attention" ;;
      fp8headgemms)
        rn="--precision fp8 --fp8-recipe delayed --fp8-lm-head --debug-fp8-lm-head-rounding nearest"
        ours 8b-L8-bf16 --model llama3.1-8b --layers 8 --seq 8192 --no-op-profile
        ours 8b-L8-fp8-delayed --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-recipe delayed \
          --no-op-profile
        ours 8b-L8-fp8-delayed-head --model llama3.1-8b --layers 8 --seq 8192 $rn
        ours 8b-L8-fp8-delayed-head-bwd --model llama3.1-8b --layers 8 --seq 8192 $rn --debug-fp8-lm-head-gemms dgrad,wgrad
        ours 8b-L8-fp8-delayed-head-fwd --model llama3.1-8b --layers 8 --seq 8192 $rn --debug-fp8-lm-head-gemms forward ;;
      fp8headgemmsacc)
        rn="fp8 --fp8-recipe delayed --fp8-lm-head --debug-fp8-lm-head-rounding nearest"
        llama_vocab_acc "bf16" "fp8 --fp8-recipe delayed" "$rn" "$rn --debug-fp8-lm-head-gemms dgrad,wgrad" \
          "$rn --debug-fp8-lm-head-gemms forward" "$rn --debug-fp8-lm-head-gemms dgrad" "$rn --debug-fp8-lm-head-gemms wgrad" ;;
      fp8headsr)
        dh="--precision fp8 --fp8-recipe delayed --fp8-lm-head --debug-fp8-lm-head-rounding"
        ours 8b-L8-fp8-delayed-head --model llama3.1-8b --layers 8 --seq 8192 $dh nearest
        ours 8b-L8-fp8-delayed-head-sr --model llama3.1-8b --layers 8 --seq 8192 $dh stochastic
        ours 8b-L8-fp8-delayed-head-2 --model llama3.1-8b --layers 8 --seq 8192 $dh nearest --no-op-profile
        ours 8b-L8-fp8-delayed-head-sr-2 --model llama3.1-8b --layers 8 --seq 8192 $dh stochastic --no-op-profile ;;
      fp8srtargets)
        dh="--precision fp8 --fp8-recipe delayed --fp8-lm-head --debug-fp8-lm-head-rounding"
        ours 8b-L8-bf16 --model llama3.1-8b --layers 8 --seq 8192 --no-op-profile
        ours 8b-L8-fp8-delayed-head --model llama3.1-8b --layers 8 --seq 8192 $dh nearest --no-op-profile
        ours 8b-L8-fp8-delayed-head-sr --model llama3.1-8b --layers 8 --seq 8192 $dh stochastic --no-op-profile
        ours 8b-L8-fp8-delayed-head-sr-attn --model llama3.1-8b --layers 8 --seq 8192 $dh stochastic --fp8-attention \
          --no-op-profile
        ours 70b-L2-bf16 --model llama3.1-70b --layers 2 --seq 8192 --no-op-profile
        ours 70b-L2-fp8-delayed-head-sr --model llama3.1-70b --layers 2 --seq 8192 $dh stochastic --no-op-profile
        peer 8b-L8-bf16 --model llama3.1-8b --layers 8 --seq 8192 --state bf16 ;;
      fp8fused)
        ours 8b-L8-bf16 $S8 --no-op-profile
        ours 8b-L8-fp8-dh-separate $S8 $DH --fp8-weight-cast separate
        ours 8b-L8-fp8-dh-fused $S8 $DH --fp8-weight-cast fused
        ours 8b-L8-fp8-dh-attn-separate $S8 $DH --fp8-attention --fp8-weight-cast separate --no-op-profile
        ours 8b-L8-fp8-dh-attn-fused $S8 $DH --fp8-attention --fp8-weight-cast fused --no-op-profile
        ours 8b-L8-bf16-m16 $S8 --moments bf16 --no-op-profile
        ours 8b-L8-fp8-dh-attn-fused-m16 $S8 $DH --fp8-attention --moments bf16 --fp8-weight-cast fused \
          --no-op-profile
        ours 8b-L8-fp8-dh-attn-separate-m16 $S8 $DH --fp8-attention --moments bf16 --fp8-weight-cast separate \
          --no-op-profile
        peer 8b-L8-bf16 $S8 --state bf16
        ours 70b-L2-bf16 $S70 --no-op-profile
        ours 70b-L2-fp8-dh-separate $S70 $DH --fp8-weight-cast separate --no-op-profile
        ours 70b-L2-fp8-dh-fused $S70 $DH --fp8-weight-cast fused --no-op-profile ;;
      grads)
        ours 8b-L8-bf16 $S8
        ours 8b-L8-bf16-g16 $S8 --grads bf16
        ours 8b-L8-bf16-m16 $S8 --moments bf16 --no-op-profile
        ours 8b-L8-bf16-m16-g16 $S8 --moments bf16 --grads bf16 --no-op-profile
        ours 8b-L8-fp8-dh $S8 $DH
        ours 8b-L8-fp8-dh-g16 $S8 $DH --grads bf16
        ours 8b-L8-fp8-dh-attn-m16 $S8 $DH --fp8-attention --moments bf16 --no-op-profile
        ours 8b-L8-fp8-dh-attn-m16-g16 $S8 $DH --fp8-attention --moments bf16 --grads bf16 --no-op-profile
        peer 8b-L8-bf16 $S8 --state bf16
        ours 70b-L2-bf16 $S70 --no-op-profile
        ours 70b-L2-bf16-g16 $S70 --grads bf16 --no-op-profile
        ours 70b-L2-fp8-dh $S70 $DH --no-op-profile
        ours 70b-L2-fp8-dh-g16 $S70 $DH --grads bf16 --no-op-profile ;;
      fp8attnmargin)
        dl="fp8 --fp8-recipe delayed"
        ACC_SEEDS=${ACC_SEEDS:-1 2 3} ACC_DATA=${ACC_DATA:-carry/text-bytes.u16} ACC_ARGS="--seq 1024 --micro-batch \
          ${ACC_MB:-4} --lr ${ACC_LR:-1e-3} ${ACC_ARGS:-}" accuracy accmid "$MID" "bf16" "$dl" "$dl --fp8-margin 2" \
          "$dl --fp8-attention" "$dl --fp8-attention --fp8-margin 2" ;;
      fp8attnemu)
        dl="fp8 --fp8-recipe delayed"
        ACC_SEEDS=${ACC_SEEDS:-1 2 3 4 5 6} ACC_DATA=${ACC_DATA:-carry/text-bytes.u16} ACC_ARGS="--seq 1024 \
          --micro-batch ${ACC_MB:-4} --lr ${ACC_LR:-1e-3} ${ACC_ARGS:-}" accuracy accmid "$MID" "bf16" "$dl" \
          "$dl --fp8-attention" "$dl --debug-fp8-attention-emulate qkv" "$dl --debug-fp8-attention-emulate o" \
          "$dl --debug-fp8-attention-emulate qkv,o" ;;
      fp8gradsr)
        ACC_LR=${ACC_LR:-1e-4} llama_vocab_acc "bf16" "fp8 --fp8-recipe delayed" \
          "fp8 --fp8-recipe delayed --debug-fp8-grad-rounding stochastic" \
          "fp8 --fp8-recipe delayed --debug-fp8-grad-rounding stochastic --fp8-lm-head" \
          "fp8 --fp8-recipe delayed --fp8-lm-head" ;;
      gradsacc)
        dh="fp8 --fp8-recipe delayed --fp8-lm-head"
        ACC_LR=${ACC_LR:-1e-4} llama_vocab_acc "bf16" "bf16 --grads bf16" "$dh" "$dh --grads bf16" ;;
      fastacc)
        dh="fp8 --fp8-recipe delayed --fp8-lm-head"
        ACC_LR=${ACC_LR:-1e-4} llama_vocab_acc "bf16" "bf16 --moments bf16 --grads bf16" "$dh" "$dh --fp8-attention" \
          "$dh --fp8-attention --moments bf16 --grads bf16"
        python3 bench/accuracy_table.py "$OUT/results" --tag accmid --against "bf16 --moments bf16 --grads bf16"
        echo "exit $?" ;;
      fp8headsracc)
        dh="fp8 --fp8-recipe delayed --fp8-lm-head --debug-fp8-lm-head-rounding"
        llama_vocab_acc "bf16" "fp8 --fp8-recipe delayed" "$dh nearest" "$dh stochastic" \
          "$dh stochastic --debug-fp8-lm-head-grad e4m3" ;;
      fp8head)
        log "lm_head_lab"; carry/lm_head_lab
        ours 8b-L8-bf16 --model llama3.1-8b --layers 8 --seq 8192 --no-op-profile
        ours 8b-L8-fp8 --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --no-op-profile
        ours 8b-L8-fp8-head --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-lm-head
        ours 8b-L8-fp8-delayed-head --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-recipe delayed \
          --fp8-lm-head --no-op-profile
        ours 70b-L2-bf16 --model llama3.1-70b --layers 2 --seq 8192 --no-op-profile
        ours 70b-L2-fp8 --model llama3.1-70b --layers 2 --seq 8192 --precision fp8 --no-op-profile
        ours 70b-L2-fp8-head --model llama3.1-70b --layers 2 --seq 8192 --precision fp8 --fp8-lm-head --no-op-profile
        peer 8b-L8-bf16 --model llama3.1-8b --layers 8 --seq 8192 --state bf16 ;;
      fp8headacc)
        accuracy acc small "bf16" "fp8" "fp8 --fp8-lm-head" ;;
      fp8attn)
        log "attention_fp8_lab"; carry/attention_fp8_lab
        ours 8b-L8-fp8-head --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-lm-head
        ours 8b-L8-fp8-head-attn --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-lm-head --fp8-attention
        ours 70b-L2-fp8-head --model llama3.1-70b --layers 2 --seq 8192 --precision fp8 --fp8-lm-head --no-op-profile
        ours 70b-L2-fp8-head-attn --model llama3.1-70b --layers 2 --seq 8192 --precision fp8 --fp8-lm-head \
          --fp8-attention --no-op-profile ;;
      fp8attnacc)
        accuracy acc small-hd128 "bf16" "fp8" "fp8 --fp8-attention" ;;
      fp8fmt)
        for f in hybrid e4m3; do
          ours 8b-L8-fp8-$f --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-format $f --no-op-profile
          ours 8b-L8-fp8-delayed-head-attn-$f --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 \
            --fp8-recipe delayed --fp8-lm-head --fp8-attention --fp8-format $f --no-op-profile
        done ;;
      fp8fmtacc)
        accuracy acc small "bf16" "fp8 --fp8-format e4m3" "fp8 --fp8-format e4m3 --fp8-recipe delayed" ;;
      fp8best)
        best="--precision fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention"
        ours 8b-L8-bf16 --model llama3.1-8b --layers 8 --seq 8192 --no-op-profile
        ours 8b-L8-fp8 --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --no-op-profile
        ours 8b-L8-fp8-best --model llama3.1-8b --layers 8 --seq 8192 $best
        ours 8b-L8-fp8-best-bf16-moments --model llama3.1-8b --layers 8 --seq 8192 $best --moments bf16 --no-op-profile
        ours 8b-L8-bf16-bf16-moments --model llama3.1-8b --layers 8 --seq 8192 --moments bf16 --no-op-profile
        ours 70b-L2-bf16 --model llama3.1-70b --layers 2 --seq 8192 --no-op-profile
        ours 70b-L2-bf16-bf16-moments --model llama3.1-70b --layers 2 --seq 8192 --moments bf16 --no-op-profile
        ours 70b-L2-fp8-best --model llama3.1-70b --layers 2 --seq 8192 $best --no-op-profile
        ours 70b-L2-fp8-best-bf16-moments --model llama3.1-70b --layers 2 --seq 8192 $best --moments bf16 \
          --no-op-profile
        peer 8b-L8-bf16 --model llama3.1-8b --layers 8 --seq 8192 --state bf16 ;;
      accum)  # in a subshell: its shorter runs (each step is $gb micro-batches) leave STEPS and WARM as they were
        (best="--precision fp8 --fp8-recipe delayed --fp8-lm-head --fp8-attention"
        gb=${GB:-16}; e8="--model llama3.1-8b --layers 8 --seq 8192 --global-batch $gb"
        e70="--model llama3.1-70b --layers 2 --seq 8192 --global-batch $gb"
        STEPS=${ACC_STEPS:-6} WARM=2
        ours 8b-L8-gb$gb-bf16 $e8 --no-op-profile
        ours 8b-L8-gb$gb-fp8 $e8 --precision fp8 --no-op-profile
        ours 8b-L8-gb$gb-fp8-best $e8 $best --no-op-profile
        peer 8b-L8-gb$gb-bf16 $e8 --state bf16
        peer 8b-L8-gb$gb-fp32 $e8 --state fp32
        ours 70b-L2-gb$gb-bf16 $e70 --no-op-profile
        ours 70b-L2-gb$gb-fp8-best $e70 $best --no-op-profile
        peer 70b-L2-gb$gb-bf16 $e70 --state bf16) ;;
      gradbuf)
        for g in shared separate; do
          ours 8b-L8-grads-$g --model llama3.1-8b --layers 8 --seq 8192 --grad-buffer $g --no-op-profile
          ours 70b-L2-grads-$g --model llama3.1-70b --layers 2 --seq 8192 --grad-buffer $g --no-op-profile
          ours 8b-L8-fp8-best-grads-$g --model llama3.1-8b --layers 8 --seq 8192 --precision fp8 --fp8-recipe delayed \
            --fp8-lm-head --fp8-attention --grad-buffer $g --no-op-profile
        done
        peer 8b-L8-fp32 --model llama3.1-8b --layers 8 --seq 8192 --state fp32
        peer 70b-L2-fp32 --model llama3.1-70b --layers 2 --seq 8192 --state fp32 ;;
      fp8run)
        for r in llama3.1-8b llama3.1-70b; do
          for p in bf16 fp8; do log "run $r $p"; $TB run $r --precision $p --out "$OUT/results/run-$r-$p"; done
        done
        log "compare"; $TB compare "$OUT"/results/run-*; echo "exit $?" ;;
      fp8more)  # the FP8 proxies of the other recipes with FP8 references (the projection's inputs), one GPU each
        for r in llama3.1-405b nemotron4-15b nemotron4-340b gpt3-175b; do
          log "run $r fp8"; $TB run $r --gpus 1 --precision fp8 --out "$OUT/results/run-$r-fp8"; echo "exit $?"
        done
        log "run nemotron4-340b bf16"; $TB run nemotron4-340b --gpus 1 --out "$OUT/results/run-nemotron4-340b-bf16"
        echo "exit $?" ;;
      recipes)
        log "main job"; bash scripts/main-job.sh $TB; echo "exit $?"
        for r in llama3.1-8b llama3.1-70b llama3.1-405b nemotron4-15b gpt3-175b; do
          log "run $r"; $TB run $r --out "$OUT/results/run-$r"; echo "exit $?"
        done
        log "compare"; $TB compare "$OUT"/results/run-*; echo "exit $?" ;;
      moerecipes)  # the MoE proxies of references/measured/h100-moe (docs/PROJECTION.md, Mixture of Experts)
        for r in grok1-314b llama4-maverick-400b mixtral-8x7b; do
          for p in bf16 fp8; do
            log "run $r $p"; $TB run $r --precision $p ${RUN_ARGS:-} --out "$OUT/results/run-$r-$p"; echo "exit $?"
          done
        done
        log "run deepseek-v3-671b bf16"  # its references are BF16 only
        $TB run deepseek-v3-671b ${RUN_ARGS:-} --out "$OUT/results/run-deepseek-v3-671b-bf16"; echo "exit $?"
        log "compare"; $TB compare "$OUT"/results/run-*; echo "exit $?" ;;
      *) echo "unknown mode $mode" ;;
    esac
  done
  if compgen -G "$OUT/results/*/results.jsonl" > /dev/null; then  # every run against the peers of its shape
    log "ratios (bench/train_ratios.py)"; python3 bench/train_ratios.py "$OUT"
  fi
} 2>&1 | tee -a "$OUT/train.log"
tar czf "$OUT/results-train.tgz" -C "$OUT" results 2>/dev/null  # its own name: another script in the same run keeps its
rm -rf "$OUT/results"
