#!/usr/bin/env python3
"""hf_lora.py: the Hugging Face peer of `trainbench train --lora-rank R`, run on the same GPU in the same job:
transformers + PEFT as users run them (the DGXC hf-llama2 / hf-mistral LoRA recipes' setting): LlamaForCausalLM or
MistralForCausalLM built from a config (random weights: nothing is downloaded), bf16, attn_implementation "sdpa"
(torch's default backend choice, causal without a mask), peft LoraConfig(r 8, lora_alpha 16, lora_dropout 0.1,
target_modules q_proj k_proj v_proj o_proj gate_proj up_proj down_proj), get_peft_model (base frozen), torch AdamW
(fused) over the adapters, clipping at 1.0, the loss of the model's forward with labels = the inputs.
--state fp32 (default, what PEFT and the Trainer's --bf16 do): PEFT keeps the adapters in fp32
(autocast_adapter_dtype) and the step runs under torch.autocast(bf16); --state bf16: bf16 adapters, no autocast.
No torch.compile unless --compile (the Trainer's default). Mistral without its sliding window (trainbench has none).
Targets: trainbench's names of the separate projections (q, k, v, o, gate, up, down; canonical: all seven).
FLOPs, timing and the record as torch_lora.py (2/3 of the `full` full-training count; CUDA events around synchronized
steps after --warmup; peak allocated memory). Progress on stderr, one JSON line on stdout.
Needs transformers and peft (pip install transformers peft).
"""
import argparse
import inspect
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_lora import check_args, lora_args, lora_record  # noqa: E402
from torch_train import PRESETS, measure  # noqa: E402

try:
    import peft
    import transformers
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM
except ImportError as e:
    sys.exit(f"hf_lora: cannot import {e.name or e}: this peer needs transformers and peft in the python3 that runs it "
             "(pip install transformers peft)")

HF_NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
            "down": "down_proj"}
LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}


def build_model(name, c, seq, dev):
    """The preset as a transformers model in bf16 on dev, from a config: Mistral for mistral-*, else Llama."""
    mistral = name.startswith("mistral")
    scaled = c.get("rope_scaled", True)
    kw = dict(vocab_size=c["vocab"], hidden_size=c["d"], intermediate_size=c["ffn"], num_hidden_layers=c["layers"],
              num_attention_heads=c["heads"], num_key_value_heads=c["kv"], head_dim=c["hd"],
              max_position_embeddings=max(seq, 131072 if scaled else 4096), rms_norm_eps=1e-5,
              rope_theta=c.get("theta", 500000.0), tie_word_embeddings=False, use_cache=False,
              attn_implementation="sdpa")
    if scaled:
        kw["rope_scaling"] = dict(LLAMA31_ROPE)
    if mistral:
        kw["sliding_window"] = None
    config = (MistralConfig if mistral else LlamaConfig)(**kw)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 (as from_config(dtype=bf16) does), in place on dev
    try:
        with torch.device(dev):
            model = (MistralForCausalLM if mistral else LlamaForCausalLM)(config)
    finally:
        torch.set_default_dtype(default)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    lora_args(ap, "mistral-7b", 2048, 8, 16.0, 0.1, "canonical", "cpu: smoke tests only (bf16 on the CPU is slow)")
    ap.set_defaults(state="fp32", compile=False)
    ap.add_argument("--gradient-checkpointing", action="store_true", help="the Trainer's option of that name")
    args = ap.parse_args()
    targets = check_args(ap, args)
    fused = [t for t in targets if t not in HF_NAMES]
    if fused:
        ap.error(f"--targets: {', '.join(fused)} are trainbench's fused linears; the HF model has the separate "
                 f"projections {', '.join(HF_NAMES)}")
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    c = dict(PRESETS[args.model], layers=args.layers or PRESETS[args.model]["layers"])
    V, s, B = c["vocab"], args.seq, args.micro_batch

    torch.manual_seed(args.seed)
    model = build_model(args.model, c, s, dev)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora = LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=args.dropout, bias="none",
                      target_modules=[HF_NAMES[t] for t in targets], task_type="CAUSAL_LM")
    kw = {}
    if "autocast_adapter_dtype" in inspect.signature(get_peft_model).parameters:  # peft >= 0.12
        kw["autocast_adapter_dtype"] = args.state == "fp32"
    model = get_peft_model(model, lora, **kw)
    model.train()
    adapters = [p for p in model.parameters() if p.requires_grad]
    if cuda:
        torch.cuda.reset_peak_memory_stats()  # from the built model on: the run's peak
    opt = torch.optim.AdamW(adapters, lr=1e-4, fused=cuda)  # the Trainer's betas (0.9, 0.999), eps 1e-8, no decay
    fwd = torch.compile(model) if args.compile else model

    def train_step(tokens):
        with torch.autocast(dev.type, torch.bfloat16, enabled=args.state == "fp32"):
            loss = fwd(input_ids=tokens, labels=tokens).loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(adapters, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach(), norm

    n = args.warmup + args.steps
    gen = torch.Generator(dev).manual_seed(args.seed)
    tokens = torch.randint(V, (n, B, s), generator=gen, device=dev)
    trainable = sum(p.numel() for p in adapters)
    adapter_dtype = str(adapters[0].dtype).replace("torch.", "")
    print(f"# torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}: "
          f"{type(model.get_base_model()).__name__} {args.model} L{c['layers']} seq {s} micro-batch {B} LoRA r "
          f"{args.rank} alpha {args.alpha:g} dropout {args.dropout:g} on {','.join(targets)} ({trainable} trainable, "
          f"{adapter_dtype}) autocast {args.state == 'fp32'} compile {args.compile} attention "
          f"{model.config._attn_implementation}", file=sys.stderr)
    record = measure(args, lambda i: train_step(tokens[i]), B * s, cuda, dev)
    out = lora_record(args, c, record, sum(p.numel() for p in model.parameters()), trainable, targets, cuda)
    print(json.dumps({"peer": "hf-peft", **out, "sdpa": "default", "attn_implementation":
                      model.config._attn_implementation, "adapter_dtype": adapter_dtype,
                      "gradient_checkpointing": args.gradient_checkpointing, "transformers": transformers.__version__,
                      "peft": peft.__version__}), flush=True)


if __name__ == "__main__":
    main()
