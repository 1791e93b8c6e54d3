#!/usr/bin/env python3
"""torch_lora.py: the PyTorch peer of `trainbench train --lora-rank R`, run on the same GPU in the same job:
torch_train.py's decoder (Llama 3.1 8B / 70B, Llama 2 70B, Mistral 7B shapes) with its base frozen (bf16 weights,
requires_grad False) and LoRA adapters on the targeted linears, in PyTorch's usual fast form: torch.compile, the
first fused SDPA backend that runs (cuDNN first), fused AdamW over the adapters only, clipping at 1.0.
Adapter on the output rows [row0, row0 + rows) of a linear y = x W^T (x [tokens, in], W [out, in]), as PEFT and
trainbench (model/lora.h) compute it:
  y[:, row0 : row0 + rows] += (alpha / r) · dropout(x) A^T B^T,   A [r, in] ~ U(-1/√in, 1/√in),   B [rows, r] = 0
each adapter with its own dropout mask. --targets takes trainbench's names: q, k, v (row blocks of the fused qkv) or
qkv (all of it), o, gate, up (row blocks of the fused gate|up fc1) or fc1, down; or the sets fused (qkv, fc1),
canonical (q, k, v, o, gate, up, down: HF PEFT's seven projections), mlperf (qkv, o). Default qkv,o,fc1,down: NeMo's
four linears (linear_qkv, linear_proj, linear_fc1, linear_fc2). --state bf16: adapters, their gradients and AdamW
moments bf16; --state fp32: fp32 adapters and moments under torch.autocast (bf16 compute; trainbench's state).
FLOPs per step, the DGXC fine-tuning convention (trainbench's model/flops.h with a frozen base): the full-training
count of torch_train.py (the `full` convention) × 2/3; the adapters' own FLOPs are not counted:
  2/3 · (6·N_matmul + 12·L·s·H·hd) per token
Timing, telemetry and the record as torch_train.py (CUDA events around synchronized steps, median/p10/p90 after
--warmup, NVML over the measured steps, peak allocated memory). Progress on stderr, one JSON line on stdout.
"""
import argparse
import json
import math
import os
import shlex
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train import Decoder, PRESETS, adamw, common_args, flops_per_token, init_, measure, pick_sdpa  # noqa: E402

LORA_FLOP_FACTOR = 2.0 / 3.0  # model/flops.h kLoraFlopFactor
TARGETS = {  # name -> (the block's linear, the row block it adapts: None for the whole linear)
    "q": ("qkv", 0), "k": ("qkv", 1), "v": ("qkv", 2), "qkv": ("qkv", None), "o": ("out", None),
    "gate": ("fc1", 0), "up": ("fc1", 1), "fc1": ("fc1", None), "down": ("fc2", None),
}
TARGET_SETS = {"fused": "qkv,fc1", "canonical": "q,k,v,o,gate,up,down", "mlperf": "qkv,o"}


def parse_targets(text):
    """A set name or a comma-separated list of TARGETS names -> the list; ValueError for an unknown or repeated
    name, or a block named with its whole linear (q with qkv)."""
    names = TARGET_SETS.get(text, text).split(",")
    for n in names:
        if n not in TARGETS:
            raise ValueError(f"unknown LoRA target '{n}': use {', '.join(TARGET_SETS)} or a list of "
                             f"{', '.join(TARGETS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"LoRA targets '{text}': a name given twice")
    for linear in ("qkv", "fc1"):
        if linear in names and any(TARGETS[n][0] == linear and TARGETS[n][1] is not None for n in names):
            raise ValueError(f"LoRA targets '{text}': {linear} is a whole fused linear; name it or its blocks")
    return names


class LoraLinear(nn.Module):
    """A frozen linear with adapters on row blocks of its output. splits: the row counts of its blocks (one block:
    the whole linear); blocks: the indices of the adapted blocks (None: the whole output)."""

    def __init__(self, base, splits, blocks, r, alpha, dropout, dtype):
        super().__init__()
        self.base, self.splits, self.blocks, self.scale = base, splits, blocks, alpha / r
        self.drop = nn.ModuleList(nn.Dropout(dropout) for _ in blocks)  # its own mask per adapter, as PEFT's modules
        n_in = base.in_features
        self.A = nn.ParameterList(nn.Parameter(torch.empty(r, n_in, dtype=dtype)) for _ in blocks)
        self.B = nn.ParameterList(nn.Parameter(torch.zeros(base.out_features if b is None else splits[b], r,
                                                           dtype=dtype)) for b in blocks)
        for a in self.A:
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))  # U(-1/sqrt(in), 1/sqrt(in))

    def delta(self, i, x):
        return F.linear(F.linear(self.drop[i](x), self.A[i]), self.B[i]) * self.scale

    def forward(self, x):
        y = self.base(x)
        if self.blocks == [None]:
            return y + self.delta(0, x)
        parts = list(y.split(self.splits, dim=-1))
        for i, b in enumerate(self.blocks):
            parts[b] = parts[b] + self.delta(i, x)
        return torch.cat(parts, dim=-1)


def add_adapters(model, c, targets, r, alpha, dropout, dtype):
    """Freezes every parameter of model (a torch_train.Decoder), then wraps each block's targeted linears in a
    LoraLinear; returns the adapters' parameters. Refuses a rank above min(in, rows) of a targeted block."""
    for p in model.parameters():
        p.requires_grad_(False)
    qd, kvd = c["heads"] * c["hd"], c["kv"] * c["hd"]
    splits = {"qkv": [qd, kvd, kvd], "out": [c["d"]], "fc1": [c["ffn"], c["ffn"]], "fc2": [c["d"]]}
    for block in model.blocks:
        for linear, sizes in splits.items():
            chosen = [TARGETS[n][1] for n in targets if TARGETS[n][0] == linear]
            if not chosen:
                continue
            base = getattr(block, linear)
            for b in chosen:
                rows = base.out_features if b is None else sizes[b]
                if r > min(base.in_features, rows):
                    sys.exit(f"torch_lora: rank {r} exceeds min(in {base.in_features}, rows {rows}) of {linear}")
            setattr(block, linear, LoraLinear(base, sizes, chosen, r, alpha, dropout, dtype))
    return [p for p in model.parameters() if p.requires_grad]


def lora_args(ap, model, seq, rank, alpha, dropout, targets, cpu_note):
    """The options both LoRA peers take (hf_lora.py too): torch_train.py's, then the adapters'."""
    common_args(ap, model, cpu_note)
    ap.set_defaults(seq=seq)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--rank", type=int, default=rank, help="LoRA rank r")
    ap.add_argument("--alpha", type=float, default=alpha, help="the adapters' scale is alpha / r (default: 2 r)")
    ap.add_argument("--dropout", type=float, default=dropout, help="dropout on each adapter's input")
    ap.add_argument("--targets", default=targets, help="fused | canonical | mlperf | a list of " + ", ".join(TARGETS))


def check_args(ap, args):
    """The checks both LoRA peers make; fills alpha's default (2 r, as trainbench) and returns the target list."""
    if args.steps < 1 or args.warmup < 0 or args.seq < 2 or args.micro_batch < 1 or args.rank < 1:
        ap.error("need --steps >= 1, --warmup >= 0, --seq >= 2, --micro-batch >= 1, --rank >= 1")
    if not 0 <= args.dropout < 1 or (args.alpha is not None and args.alpha <= 0):
        ap.error("need --dropout in [0, 1) and --alpha > 0")
    args.alpha = args.alpha if args.alpha is not None else 2.0 * args.rank
    try:
        return parse_targets(args.targets)
    except ValueError as e:
        ap.error(str(e))


def lora_record(args, c, record, params, trainable, targets, cuda):
    """The record both LoRA peers print: shape, LoRA settings, torch_train.measure()'s timing and memory, FLOPs.
    params: every parameter, adapters included; the record's "params" is the base's (as trainbench's record)."""
    L, s, B = c["layers"], args.seq, args.micro_batch
    fpt = LORA_FLOP_FACTOR * flops_per_token(c, s)
    return {
        "bench": "train", "case": f"{args.model}/L{L}/s{s}/mb{B}/gb{B}/lora-r{args.rank}/{'cuda' if cuda else 'cpu'}",
        "model": args.model, "layers": L, "seq": s, "micro_batch": B, "global_batch": B,
        "device": "cuda" if cuda else "cpu", "state": args.state, "compile": args.compile,
        "params": params - trainable, "params_trainable": trainable, "params_frozen": params - trainable,
        "lora": {"rank": args.rank, "alpha": args.alpha, "dropout": args.dropout, "targets": ",".join(targets)},
        **record,
        "flops_per_token": fpt, "flops_per_step": fpt * B * s, "flop_convention": "full", "flop_task": "lora",
        "tflops": fpt * B * s / (record["step_ms"]["median"] / 1e3) / 1e12,
        "max_memory_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if cuda else None,
        "command": shlex.join([sys.executable, *sys.argv]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    lora_args(ap, "llama3.1-8b", 4096, 16, None, 0.0, "qkv,o,fc1,down", "cpu: smoke tests only")
    args = ap.parse_args()
    targets = check_args(ap, args)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    args.compile = cuda if args.compile is None else args.compile
    c = dict(PRESETS[args.model], layers=args.layers or PRESETS[args.model]["layers"])
    L, V, s, B = c["layers"], c["vocab"], args.seq, args.micro_batch

    backend, gqa = pick_sdpa(c, s, dev)
    if cuda:
        torch.cuda.reset_peak_memory_stats()  # the probe's buffers are gone; the peak below is the run's
    torch.manual_seed(args.seed)
    with torch.device(dev):  # built in place in bf16: no transient fp32 copy in the memory peak
        model = Decoder(c, s, torch.bfloat16)
        init_(model, L)
        adapters = add_adapters(model, c, targets, args.rank, args.alpha, args.dropout,
                                torch.bfloat16 if args.state == "bf16" else torch.float32)
    for block in model.blocks:
        block.gqa = gqa
    opt = adamw(adapters, cuda)  # torch_train.py's (the adapters are matrices: weight decay 0.1 on all)
    fwd = torch.compile(model) if args.compile else model  # whole model, as torch_train.py (compile_ms: step 1)

    def train_step(tokens, targets_):
        with sdpa_kernel([backend]), torch.autocast(dev.type, torch.bfloat16, enabled=args.state == "fp32"):
            loss = fwd(tokens, targets_)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(adapters, 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach(), norm

    n = args.warmup + args.steps  # random tokens and targets, drawn on the device before the loop
    gen = torch.Generator(dev).manual_seed(args.seed)
    tokens = torch.randint(V, (n, B, s), generator=gen, device=dev)
    labels = torch.randint(V, (n, B, s), generator=gen, device=dev)
    trainable = sum(p.numel() for p in adapters)
    print(f"# torch {torch.__version__}: {args.model} L{L} seq {s} micro-batch {B} LoRA r {args.rank} alpha "
          f"{args.alpha:g} dropout {args.dropout:g} on {','.join(targets)} ({trainable} trainable) state {args.state} "
          f"compile {args.compile} sdpa {backend.name} gqa {'native' if gqa else 'repeated'}", file=sys.stderr)
    record = measure(args, lambda i: train_step(tokens[i], labels[i]), B * s, cuda, dev)
    out = lora_record(args, c, record, sum(p.numel() for p in model.parameters()), trainable, targets, cuda)
    print(json.dumps({"peer": "torch", **out, "sdpa": backend.name, "gqa": "native" if gqa else "repeated"}),
          flush=True)


if __name__ == "__main__":
    main()
