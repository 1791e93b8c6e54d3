#!/usr/bin/env python3
"""torch_train.py: the PyTorch peer of `trainbench train`, run on the same GPU in the same job: the same dense
decoder (Llama 3.1 family; pre-norm, no biases, untied embeddings) trained in PyTorch's usual fast form:
torch.compile, cuDNN SDPA (causal, native GQA), fused AdamW, foreach grad clipping.
  x = E[tokens];  per layer: h = x + Wo·attn(rope(q), rope(k), v) with q,k,v = Wqkv·rmsnorm1(x),
                  x = h + W2·(silu(gate) * up) with gate,up = W1·rmsnorm2(h);  loss = CE(W_lm·rmsnorm(x))
--state bf16: parameters, gradients and AdamW moments bf16.  --state fp32: fp32 parameters (master weights)
and moments, bf16 compute under torch.autocast (the usual AMP form; the same optimizer state as ours).
FLOPs per token (the `full` convention of model/flops.h, no causal halving):
  6·N_matmul + 12·L·s·H·hd,  N_matmul = L·(d·(H+2G)·hd + H·hd·d + 3·ffn·d) + V·d (LM head; no embedding)
--global-batch G: G / micro-batch micro-batches per step, their gradients summed in .grad (bf16 under --state bf16,
fp32 under AMP) with each loss divided by their count, then one clip and one AdamW step (as trainbench's accumulation).
Timing: CUDA events around each step (synchronized, so steps don't overlap); median/p10/p90 over the
steps after --warmup. Over the measured steps NVML's power, SM clock and energy (nvml_power.py): "telemetry" and
"energy_j_per_token", as trainbench's record has them. Progress on stderr, one JSON line on stdout.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from nvml_power import for_torch_device

PRESETS = {  # d_model, query heads, kv heads, head_dim, ffn, vocab, layers; RoPE θ and scaling if not Llama 3.1's
    "llama3.1-8b": dict(d=4096, heads=32, kv=8, hd=128, ffn=14336, vocab=128256, layers=32),
    "llama3.1-70b": dict(d=8192, heads=64, kv=8, hd=128, ffn=28672, vocab=128256, layers=80),
    "llama2-70b": dict(d=8192, heads=64, kv=8, hd=128, ffn=28672, vocab=32000, layers=80, theta=10000.0,
                       rope_scaled=False),
    "mistral-7b": dict(d=4096, heads=32, kv=8, hd=128, ffn=14336, vocab=32000, layers=32, theta=10000.0,
                       rope_scaled=False),
    "tiny": dict(d=128, heads=4, kv=2, hd=32, ffn=256, vocab=512, layers=2),
}
ROPE_THETA, EPS = 500000.0, 1e-5


def rope_inv_freq(hd, theta=ROPE_THETA, scaled=True, factor=8.0, low=1.0, high=4.0, orig=8192):
    """theta^(-2i/hd) with Llama 3.1's apply_scaling (scaled=False: without, as Mixtral): wavelengths shorter than
    orig/high are kept, longer than orig/low slowed by `factor`, and the band in between interpolated smoothly."""
    f = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    if not scaled:
        return f
    wavelen = 2 * math.pi / f
    smooth = (orig / wavelen - low) / (high - low)
    mid = (1 - smooth) * f / factor + smooth * f
    return torch.where(wavelen < orig / high, f, torch.where(wavelen > orig / low, f / factor, mid))


def rope(x, cos, sin):
    """Rotate-half convention (as ops/cpu/rope.h): for i < hd/2 the pair (x_i, x_{i+hd/2}) at position p is
    rotated by p·inv_freq[i]. x: [B, S, heads, hd]; cos, sin: [S, 1, hd] (the hd/2 angles repeated twice)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Block(nn.Module):
    def __init__(self, c, dtype, dense_mlp=True):  # dense_mlp False: no fc1, fc2 (torch_moe.py's block has experts)
        super().__init__()
        self.H, self.G, self.hd, self.gqa = c["heads"], c["kv"], c["hd"], True
        self.norm1, self.norm2 = (nn.RMSNorm(c["d"], eps=EPS, dtype=dtype) for _ in range(2))
        linear = lambda n_in, n_out: nn.Linear(n_in, n_out, bias=False, dtype=dtype)  # weight [n_out, n_in]
        self.qkv = linear(c["d"], (c["heads"] + 2 * c["kv"]) * c["hd"])  # rows: Q heads, K heads, V heads
        self.out = linear(c["heads"] * c["hd"], c["d"])
        if dense_mlp:
            self.fc1 = linear(c["d"], 2 * c["ffn"])  # rows [0, ffn) gate, [ffn, 2 ffn) up
            self.fc2 = linear(c["ffn"], c["d"])

    def attention(self, x, cos, sin):  # h = x + Wo·attn(rope(q), rope(k), v)
        B, S, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, S, -1, self.hd).split([self.H, self.G, self.G], dim=2)
        o = attend(rope(q, cos, sin).transpose(1, 2), rope(k, cos, sin).transpose(1, 2), v.transpose(1, 2), self.gqa)
        return x + self.out(o.transpose(1, 2).reshape(B, S, -1))

    def forward(self, x, cos, sin):
        h = self.attention(x, cos, sin)
        gate, up = self.fc1(self.norm2(h)).chunk(2, dim=-1)
        return h + self.fc2(F.silu(gate) * up)


def attend(q, k, v, gqa):  # [B, heads, S, hd]; gqa False: K/V heads repeated (for a backend without GQA)
    if not gqa:
        k, v = (t.repeat_interleave(q.size(1) // t.size(1), dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)


class Decoder(nn.Module):
    def __init__(self, c, seq, dtype, block=Block):  # dtype: the parameters'; compute (and the rope tables) is bf16
        super().__init__()
        self.embed = nn.Embedding(c["vocab"], c["d"], dtype=dtype)
        self.blocks = nn.ModuleList(block(c, dtype) for _ in range(c["layers"]))
        self.norm = nn.RMSNorm(c["d"], eps=EPS, dtype=dtype)
        self.lm_head = nn.Linear(c["d"], c["vocab"], bias=False, dtype=dtype)  # untied
        inv_freq = rope_inv_freq(c["hd"], c.get("theta", ROPE_THETA), c.get("rope_scaled", True))
        angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq).repeat(1, 2)[:, None]
        self.register_buffer("cos", angles.cos().to(torch.bfloat16), persistent=False)
        self.register_buffer("sin", angles.sin().to(torch.bfloat16), persistent=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        logits = self.lm_head(self.norm(x))  # bf16; the loss in fp32 (Inductor may fuse the upcast into CE)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def init_(model, layers):  # normal(0, 0.02), output projections 0.02/sqrt(2L), norm gains 1
    for name, p in model.named_parameters():
        if p.dim() == 1:
            nn.init.ones_(p)
        else:
            out_proj = name.endswith(("out.weight", "fc2.weight", "wo.weight", "w2.weight"))  # (TP peer: wo, w2)
            std = 0.02 / math.sqrt(2 * layers) if out_proj else 0.02
            nn.init.normal_(p, 0.0, std)


def pick_sdpa(c, seq, dev):
    """The first backend that runs a causal forward + backward at these shapes: cuDNN, then Flash, then
    memory-efficient; native GQA first, repeated K/V heads second. On the CPU: the math backend."""
    if dev.type == "cpu":
        return SDPBackend.MATH, True
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        for gqa in (True, False):
            try:
                q, k, v = (torch.randn(1, h, seq, c["hd"], device=dev, dtype=torch.bfloat16, requires_grad=True)
                           for h in (c["heads"], c["kv"], c["kv"]))
                with sdpa_kernel([backend]):
                    attend(q, k, v, gqa).sum().backward()
                torch.cuda.synchronize()
                return backend, gqa
            except RuntimeError as e:
                print(f"# note: sdpa {backend.name} gqa={gqa} unavailable: {str(e).splitlines()[0]}", file=sys.stderr)
    sys.exit("torch_train: no fused SDPA backend runs at these shapes")


def common_args(ap, model, cpu_note):
    """The options both peers take (torch_train_tp.py too): model, shape, steps, optimizer state, compile, device."""
    ap.add_argument("--model", default=model, choices=PRESETS)
    ap.add_argument("--layers", type=int, help="override the preset's layer count")
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=20, help="measured steps")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured steps before them")
    ap.add_argument("--state", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="default: on for cuda")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help=cpu_note)
    ap.add_argument("--seed", type=int, default=1234)


def timed(fn, cuda):
    """fn() and its seconds: CUDA events around it, synchronized (steps do not overlap); the host clock on the CPU."""
    if not cuda:
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out = fn()
    stop.record()
    torch.cuda.synchronize()
    return out, start.elapsed_time(stop) / 1e3


def flops_per_token(c, s):
    """The `full` convention (model/flops.h): 6 N_matmul + 12 L s H hd, the LM head counted, the embedding not."""
    L, d, H, G, hd, ffn, V = (c[k] for k in ("layers", "d", "heads", "kv", "hd", "ffn", "vocab"))
    return 6 * (L * (d * (H + 2 * G) * hd + H * hd * d + 3 * ffn * d) + V * d) + 12 * L * s * H * hd


def log_step(i, args, loss, norm, sec):
    """One step's line on stderr (warmup steps tagged)."""
    tag = "warmup" if i < args.warmup else "step"
    print(f"{tag} {i + 1}/{args.steps + args.warmup} | loss {loss:.4f} | grad_norm {norm:.3f} | {sec * 1e3:.1f} ms",
          file=sys.stderr, flush=True)


def step_record(args, times, losses, tokens_per_step, cuda):
    """What both peers report of their timed steps: step-time quantiles after warmup, tokens/s, losses, memory."""
    measured = times[args.warmup:]
    median = quantile(measured, 0.5)
    return {
        "steps": args.steps, "warmup_steps": args.warmup,
        "step_ms": {"median": 1e3 * median, "p10": 1e3 * quantile(measured, 0.1),
                    "p90": 1e3 * quantile(measured, 0.9), "n": len(measured)},
        "tokens_per_s": tokens_per_step / median,
        "compile_ms": 1e3 * times[0], "loss": losses, "loss_first": losses[0], "loss_last": losses[-1],
        "max_memory_allocated_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name() if cuda else None, "options": vars(args),
    }


def adamw(params, fused):
    """AdamW as both peers run it: lr 3e-4, betas (0.9, 0.95), weight decay 0.1 on matrices, none on norm gains."""
    return torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                             lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=fused)


def measure(args, step, tokens_per_step, cuda, dev):
    """step(i) -> (loss, grad_norm) for the --warmup then --steps steps, each timed(); NVML over the measured ones.
    Returns step_record()'s dict with "telemetry" and "energy_j_per_token" added on the GPU."""
    times, losses = [], []
    power = for_torch_device(torch, dev.index or 0) if cuda else None
    for i in range(args.warmup + args.steps):
        if power and i == args.warmup:
            power.start()  # the measured steps only
        (loss, norm), sec = timed(lambda: step(i), cuda)
        times.append(sec)
        losses.append(loss.item())
        log_step(i, args, losses[-1], norm.item(), sec)
    if power:
        power.stop()
    record = step_record(args, times, losses, tokens_per_step, cuda)
    if power:
        record["telemetry"] = power.summary()
        if record["telemetry"]["available"]:
            record["energy_j_per_token"] = record["telemetry"]["energy_j"] / (args.steps * tokens_per_step)
    return record


def quantile(xs, q):  # linear interpolation between order statistics (numpy's default, as core/stats.h)
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(ap, "llama3.1-8b", "cpu: smoke tests only")
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--global-batch", type=int, help="sequences per step, a multiple of --micro-batch (default: it)")
    args = ap.parse_args()
    args.global_batch = args.global_batch or args.micro_batch
    if args.steps < 1 or args.warmup < 0 or args.seq < 2 or args.micro_batch < 1:
        ap.error("need --steps >= 1, --warmup >= 0, --seq >= 2, --micro-batch >= 1")
    if args.global_batch % args.micro_batch:
        ap.error(f"--global-batch {args.global_batch} is not a multiple of --micro-batch {args.micro_batch}")
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    args.compile = cuda if args.compile is None else args.compile
    c = dict(PRESETS[args.model], layers=args.layers or PRESETS[args.model]["layers"])
    L, V = c["layers"], c["vocab"]
    s, B, G = args.seq, args.micro_batch, args.global_batch
    accum = G // B

    backend, gqa = pick_sdpa(c, s, dev)
    if cuda:
        torch.cuda.reset_peak_memory_stats()  # the probe's buffers are gone; the peak below is the run's
    torch.manual_seed(args.seed)
    with torch.device(dev):  # built in place in the state's dtype: no transient fp32 copy in the memory peak
        model = Decoder(c, s, torch.bfloat16 if args.state == "bf16" else torch.float32)
    init_(model, L)
    for block in model.blocks:
        block.gqa = gqa
    params = list(model.parameters())
    opt = adamw(params, cuda)
    # Whole model compiled, not block by block: one graph lets Inductor fuse across block boundaries
    # (residual add + RMSNorm) and around the LM head and loss; the price is a longer first step (the L blocks
    # are traced unrolled), which is reported as compile_ms and kept out of the measured steps by --warmup.
    fwd = torch.compile(model) if args.compile else model

    def train_step(tokens, targets):  # [accum, B, s] each; returns the step's mean loss and the gradient norm
        total = 0.0
        for a in range(accum):
            with sdpa_kernel([backend]), torch.autocast(dev.type, torch.bfloat16, enabled=args.state == "fp32"):
                loss = fwd(tokens[a], targets[a]) / accum
            loss.backward()
            total = total + loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total, norm

    n = args.warmup + args.steps  # random tokens and targets, drawn on the device before the loop
    gen = torch.Generator(dev).manual_seed(args.seed)
    tokens = torch.randint(V, (n, accum, B, s), generator=gen, device=dev)
    targets = torch.randint(V, (n, accum, B, s), generator=gen, device=dev)
    print(f"# torch {torch.__version__}: {args.model} L{L} seq {s} micro-batch {B} global batch {G} state {args.state} "
          f"compile {args.compile} sdpa {backend.name} gqa {'native' if gqa else 'repeated'}", file=sys.stderr)
    record = measure(args, lambda i: train_step(tokens[i], targets[i]), G * s, cuda, dev)
    fpt = flops_per_token(c, s)
    print(json.dumps({
        "peer": "torch", "bench": "train", "case": f"{args.model}/L{L}/s{s}/mb{B}/gb{G}/{dev.type}",
        "model": args.model, "layers": L, "seq": s, "micro_batch": B, "global_batch": G, "device": dev.type,
        "state": args.state, "compile": args.compile, "sdpa": backend.name, "gqa": "native" if gqa else "repeated",
        "params": sum(p.numel() for p in params), **record,
        "flops_per_token": fpt, "flops_per_step": fpt * G * s,
        "flop_convention": "full", "tflops": fpt * G * s / (record["step_ms"]["median"] / 1e3) / 1e12,
        "max_memory_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
    }), flush=True)


if __name__ == "__main__":
    main()
