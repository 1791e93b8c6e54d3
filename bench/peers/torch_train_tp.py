#!/usr/bin/env python3
"""torch_train_tp.py: the PyTorch tensor-parallel peer of `trainbench train --gpus N --tp N`, in PyTorch's native
form (torch.distributed.tensor.parallel on a device mesh, as TorchTitan runs Llama): Megatron column / row parallel
attention and MLP with sequence parallelism, the embedding row-parallel and the LM head column-parallel with a
vocabulary-parallel loss, each block torch.compile'd, cuDNN SDPA, AdamW and clipping over the sharded parameters.
Launch one process per GPU: `torchrun --nproc-per-node N bench/peers/torch_train_tp.py --model llama3.1-70b
--layers 4` (rank 0 prints the JSON line; --device cpu runs on gloo for smoke tests).
The model is torch_train.py's but for the fused weights: Q, K, V and gate, up are separate linears here, so that
column sharding gives each rank whole heads (H/N query and G/N key-value heads) and matching gate / up halves.
  per layer:  a = all-gather_seq(rmsnorm1(x));  o = attn(rope(a Wq_r^T), rope(a Wk_r^T), a Wv_r^T)
              x = x + reduce-scatter_seq(o Wo_r^T);  b = all-gather_seq(rmsnorm2(x))
              x = x + reduce-scatter_seq((silu(b W1_r^T) * b W3_r^T) W2_r^T)      (W_r: this rank's shard)
FLOPs per token as torch_train.py (the `full` convention); tokens/s are the job's (one sequence per step, all
GPUs), TFLOP/s per GPU. Timing: CUDA events around each step on rank 0, after a barrier.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, loss_parallel, parallelize_module)
from torch.nn.attention import sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train  # noqa: E402
from torch_train import (EPS, PRESETS, attend, common_args, flops_per_token, init_, log_step, pick_sdpa,  # noqa
                         rope, step_record, timed)


class Attention(nn.Module):
    def __init__(self, c, dtype):
        super().__init__()
        self.hd, self.gqa = c["hd"], True
        linear = lambda n_in, n_out: nn.Linear(n_in, n_out, bias=False, dtype=dtype)
        self.wq, self.wk, self.wv = (linear(c["d"], h * c["hd"]) for h in (c["heads"], c["kv"], c["kv"]))
        self.wo = linear(c["heads"] * c["hd"], c["d"])

    def forward(self, a, cos, sin):  # a: the whole sequence (replicated); q, k, v: this rank's heads
        B, S, _ = a.shape
        q, k, v = (w(a).view(B, S, -1, self.hd) for w in (self.wq, self.wk, self.wv))
        o = attend(rope(q, cos, sin).transpose(1, 2), rope(k, cos, sin).transpose(1, 2), v.transpose(1, 2), self.gqa)
        return self.wo(o.transpose(1, 2).reshape(B, S, -1))


class Mlp(nn.Module):
    def __init__(self, c, dtype):
        super().__init__()
        linear = lambda n_in, n_out: nn.Linear(n_in, n_out, bias=False, dtype=dtype)
        self.w1, self.w3, self.w2 = linear(c["d"], c["ffn"]), linear(c["d"], c["ffn"]), linear(c["ffn"], c["d"])

    def forward(self, b):
        return self.w2(F.silu(self.w1(b)) * self.w3(b))


class Block(nn.Module):
    def __init__(self, c, dtype):
        super().__init__()
        self.norm1, self.norm2 = (nn.RMSNorm(c["d"], eps=EPS, dtype=dtype) for _ in range(2))
        self.attn, self.mlp = Attention(c, dtype), Mlp(c, dtype)

    def forward(self, x, cos, sin):
        h = x + self.attn(self.norm1(x), cos, sin)
        return h + self.mlp(self.norm2(h))


class Decoder(torch_train.Decoder):  # its blocks with the names TorchTitan's plan shards
    def __init__(self, c, seq, dtype):
        super().__init__(c, seq, dtype, block=Block)

    def forward(self, tokens):  # the logits, sharded over the vocabulary (a DTensor)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.lm_head(self.norm(x))


def tensor_parallel(model, mesh):
    """TorchTitan's Llama plan: the residual stream sharded over the sequence (dim 1) between the blocks'
    all-gathers and reduce-scatters; the loss parallel over the vocabulary."""
    parallelize_module(model, mesh, {
        "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    })
    for block in model.blocks:
        parallelize_module(block, mesh, {
            "norm1": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                       desired_input_layouts=(Replicate(), None, None)),
            "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
            "norm2": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.w1": ColwiseParallel(), "mlp.w3": ColwiseParallel(),
            "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
        })


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(ap, "llama3.1-70b", "cpu: smoke tests only (gloo)")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.seq < 2:
        ap.error("need --steps >= 1, --warmup >= 0, --seq >= 2")
    if "RANK" not in os.environ:
        ap.error("start one process per GPU: torchrun --nproc-per-node N bench/peers/torch_train_tp.py ...")
    cuda = args.device == "cuda"
    args.compile = cuda if args.compile is None else args.compile
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device(f"cuda:{torch.cuda.current_device()}" if cuda else "cpu")
    mesh = init_device_mesh("cuda" if cuda else "cpu", (world,))
    c = dict(PRESETS[args.model], layers=args.layers or PRESETS[args.model]["layers"])
    L, H, G, ffn, V = (c[k] for k in ("layers", "heads", "kv", "ffn", "vocab"))
    s = args.seq
    if H % world or G % world or ffn % world or V % world or s % world:
        ap.error(f"heads {H}, kv heads {G}, ffn {ffn}, vocabulary {V} and --seq {s} must divide by {world} ranks")

    local = dict(c, heads=H // world, kv=G // world)  # what one rank's attention sees
    backend, gqa = pick_sdpa(local, s, dev)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(args.seed)  # every rank draws the same full weights, then keeps its shard
    with torch.device(dev):
        model = Decoder(c, s, torch.bfloat16 if args.state == "bf16" else torch.float32)
    init_(model, L)
    for block in model.blocks:
        block.attn.gqa = gqa
    tensor_parallel(model, mesh)
    if args.compile:
        for i, block in enumerate(model.blocks):
            model.blocks[i] = torch.compile(block)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)

    def train_step(tokens, targets):
        with sdpa_kernel([backend]), torch.autocast(dev.type, torch.bfloat16, enabled=args.state == "fp32"):
            logits = model(tokens)
        with loss_parallel():
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(0, 1))
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach(), norm.full_tensor() if hasattr(norm, "full_tensor") else norm

    n = args.warmup + args.steps  # the same tokens on every rank (one sequence per step)
    gen = torch.Generator(dev).manual_seed(args.seed)
    tokens = torch.randint(V, (n, 1, s), generator=gen, device=dev)
    targets = torch.randint(V, (n, 1, s), generator=gen, device=dev)
    if rank == 0:
        print(f"# torch {torch.__version__}: {args.model} L{L} seq {s} tp {world} state {args.state} compile "
              f"{args.compile} sdpa {backend.name}", file=sys.stderr)
    times, losses = [], []
    for i in range(n):
        dist.barrier()
        (loss, norm), sec = timed(lambda: train_step(tokens[i], targets[i]), cuda)
        times.append(sec)
        losses.append(float(loss.full_tensor() if hasattr(loss, "full_tensor") else loss))
        if rank == 0:
            log_step(i, args, losses[-1], float(norm), sec)

    if rank == 0:
        record = step_record(args, times, losses, s, cuda)
        fpt = flops_per_token(c, s)
        print(json.dumps({
            "peer": "torch", "bench": "train", "case": f"{args.model}/L{L}/s{s}/mb1/gb1/{dev.type}/tp{world}",
            "model": args.model, "layers": L, "seq": s, "micro_batch": 1, "global_batch": 1, "tp": world,
            "device": dev.type, "state": args.state, "compile": args.compile, "sdpa": backend.name, **record,
            "flops_per_token": fpt, "flop_convention": "full",
            "tflops_per_gpu": fpt * s / (record["step_ms"]["median"] / 1e3) / 1e12 / world,
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
