#!/usr/bin/env python3
"""torch_moe.py: the PyTorch peer of trainbench's Mixture-of-Experts training, on one GPU: a Mixtral-style decoder
(torch_train.py's Llama block: RMSNorm, RoPE, GQA attention through the first fused SDPA backend that runs, cuDNN first;
the MLP replaced by a MoE layer) trained in PyTorch's usual fast form: torch.compile, bf16 parameters, gradients and
AdamW moments (fused AdamW), clipping at 1.0. RoPE θ 1e6 without scaling (Mixtral, tiny-moe), θ 500000 with Llama 3.1's
scaling (grok1-314b: a Llama-family block with Grok-1's shapes).
MoE layer, per micro-batch of T = micro-batch · seq tokens x [T, d] (the norm2 output):
  p = softmax(x Wr^T) in fp32 (Wr [E, d]);  chosen e_t1..e_tk = top_k(p_t) (--routing balanced: (g·k + j) mod E,
  g = b·seq + position, NeMo's forced balance);  w_tj = p_t,e_tj / sum_j p_t,e_tj  (Mixtral's renormalisation)
  dropless dispatch: the T·k pairs (t, j) sorted by expert (stable argsort), their rows x_t gathered, and per expert
  e the SwiGLU MLP  o = fc2_e · (silu(gate) * up), gate|up = fc1_e · x   (fc1 [E, 2F, d], fc2 [E, d, F]),
  by torch._grouped_mm (--experts-impl grouped) or a Python loop of matmuls (loop);  y_t = sum_j w_tj o_(t, j)
  aux = 0.01 · E · sum_i f_i P_i  (f_i: share of the T·k pairs routed to i, P_i: mean_t p_ti), summed over the layers
  and added to the objective; the reported loss is the LM loss alone (as trainbench reports it).
FLOPs per token, the DGXC MoE convention (full attention, no causal halving; router and dispatch not counted):
  6·L·(d·(H+2G)·hd + H·hd·d) + 12·L·s·H·hd + 18·L·F·d·top_k + 6·V·d
Timing, telemetry and the record as torch_train.py (CUDA events around synchronized steps, median/p10/p90 after
--warmup, NVML over the measured steps); the record adds the last step's routing statistics. --self-check: the
grouped and loop experts give the same loss, aux loss and gradients, and the layer matches a dense reference.
"""
import argparse
import json
import os
import shlex
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train  # noqa: E402
from torch_train import adamw, init_, measure, pick_sdpa  # noqa: E402

PRESETS = {  # d_model, query heads, kv heads, head_dim, expert ffn F, experts E, top_k, vocab, layers, RoPE
    "mixtral-8x7b": dict(d=4096, heads=32, kv=8, hd=128, ffn=14336, experts=8, top_k=2, vocab=32000, layers=32,
                         theta=1e6, rope_scaled=False),
    "grok1-314b": dict(d=6144, heads=48, kv=8, hd=128, ffn=32768, experts=8, top_k=2, vocab=128256, layers=64,
                       theta=500000.0, rope_scaled=True),
    "tiny-moe": dict(d=128, heads=4, kv=2, hd=32, ffn=256, experts=4, top_k=2, vocab=512, layers=2,
                     theta=1e6, rope_scaled=False),
}
AUX_COEFF = 0.01


def experts_grouped(rows, counts, w1, w2):
    """rows [M, d] sorted by expert, counts [E] (expert e's rows are [offs[e-1], offs[e])). torch._grouped_mm(mat_a
    [M, K], mat_b [E, K, N], offs) computes out[offs[e-1]:offs[e]] = mat_a[offs[e-1]:offs[e]] @ mat_b[e], offs the
    int32 cumulative *end* offsets [E], on the device (bf16 on sm90/sm100: CUTLASS, no host sync). mat_b may be
    row- or column-major per expert; we pass the [E, N, K] nn.Linear-layout weights transposed (a view, column-major:
    the layout torchtitan passes), so its backward is the same kernel with offsets on M or on K."""
    offs = counts.cumsum(0).to(torch.int32)
    gate, up = torch._grouped_mm(rows, w1.transpose(-2, -1), offs=offs, out_dtype=rows.dtype).chunk(2, dim=-1)
    return torch._grouped_mm(F.silu(gate) * up, w2.transpose(-2, -1), offs=offs, out_dtype=rows.dtype)


def experts_loop(rows, counts, w1, w2):
    """The same with one pair of matmuls per expert (a host sync for the counts; a graph break under compile)."""
    outs, lo = [], 0
    for e, n in enumerate(counts.tolist()):
        gate, up = (rows[lo:lo + n] @ w1[e].t()).chunk(2, dim=-1)
        outs.append((F.silu(gate) * up) @ w2[e].t())
        lo += n
    return torch.cat(outs)


class Experts(nn.Module):  # weight [E, n_out, n_in]: each expert's nn.Linear weight (init_ sees "fc2.weight")
    def __init__(self, E, n_out, n_in, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(E, n_out, n_in, dtype=dtype))


class Moe(nn.Module):
    def __init__(self, c, dtype):
        super().__init__()
        self.E, self.k, self.routing, self.impl = c["experts"], c["top_k"], c["routing"], c["experts_impl"]
        self.router = nn.Linear(c["d"], self.E, bias=False, dtype=dtype)  # Wr [E, d]
        self.fc1 = Experts(self.E, 2 * c["ffn"], c["d"], dtype)  # rows [0, F) gate, [F, 2F) up
        self.fc2 = Experts(self.E, c["d"], c["ffn"], dtype)

    def route(self, x):  # x [T, d] -> p [T, E] fp32, chosen experts [T, k], weights [T, k] fp32
        p = F.linear(x.float(), self.router.weight.float()).softmax(dim=-1)
        if self.routing == "balanced":
            g = torch.arange(x.size(0), device=x.device)
            expert = (g[:, None] * self.k + torch.arange(self.k, device=x.device)) % self.E
            score = p.gather(1, expert)
        else:
            score, expert = p.topk(self.k, dim=-1)
        return p, expert, score / score.sum(dim=-1, keepdim=True)

    def forward(self, x):  # x [T, d] -> y [T, d], aux loss (fp32), tokens per expert [E] (int64)
        T, E, k = x.size(0), self.E, self.k
        p, expert, w = self.route(x)
        pair_expert = expert.flatten()  # pair t·k + j
        counts = torch.zeros(E, dtype=torch.int64, device=x.device).scatter_add_(0, pair_expert,
                                                                                 torch.ones_like(pair_expert))
        aux = AUX_COEFF * E * (counts.float() / (T * k) * p.mean(dim=0)).sum()
        order = torch.argsort(pair_expert, stable=True)  # row r of the dispatch is pair order[r]
        experts = experts_grouped if self.impl == "grouped" else experts_loop
        o = experts(x[order // k], counts, self.fc1.weight, self.fc2.weight)
        o = o[torch.argsort(order)].view(T, k, -1)  # unpermute: back in pair order, then weighted sum in fp32
        return (o.float() * w[..., None]).sum(dim=1).to(x.dtype), aux, counts


class MoeBlock(torch_train.Block):
    def __init__(self, c, dtype):
        super().__init__(c, dtype, dense_mlp=False)
        self.moe = Moe(c, dtype)

    def forward(self, x, cos, sin):
        h = self.attention(x, cos, sin)
        y, aux, counts = self.moe(self.norm2(h).flatten(0, 1))
        return h + y.view_as(h), aux, counts


class MoeDecoder(torch_train.Decoder):
    def __init__(self, c, seq, dtype):
        super().__init__(c, seq, dtype, block=MoeBlock)

    def forward(self, tokens, targets):  # LM loss, aux loss summed over layers, tokens per expert [L, E]
        x, aux, counts = self.embed(tokens), [], []
        for block in self.blocks:
            x, a, n = block(x, self.cos, self.sin)
            aux.append(a)
            counts.append(n)
        logits = self.lm_head(self.norm(x))
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
        return loss, torch.stack(aux).sum(), torch.stack(counts)


def flops_per_token(c, s):
    """The DGXC MoE convention (module docstring): every layer as top_k experts of width F, the LM head counted."""
    L, d, H, G, hd, ffn, V, k = (c[n] for n in ("layers", "d", "heads", "kv", "hd", "ffn", "vocab", "top_k"))
    return 6 * L * (d * (H + 2 * G) * hd + H * hd * d) + 12 * L * s * H * hd + 18 * L * ffn * d * k + 6 * V * d


def grouped_gemm_name(impl, dev):
    if impl == "loop":
        return "loop: torch.matmul per expert"
    fast = dev.type == "cuda" and torch.cuda.get_device_capability(dev)[0] in (9, 10)
    return "torch._grouped_mm: " + ("CUTLASS bf16 grouped GEMM" if fast else "ATen fallback (mm per group)")


def rel_err(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def self_check(c, seq, dev, backend):
    """Grouped vs loop experts on one model and batch (fp32 on the CPU, bf16 on the GPU): LM loss, aux loss, routing
    and every gradient; one layer against a dense reference (every expert on every token, then the chosen ones);
    the two implementations with an expert that gets no rows. Returns the errors and whether all are in tolerance."""
    dtype = torch.float32 if dev.type == "cpu" else torch.bfloat16
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.manual_seed(0)
    with torch.device(dev):
        model = MoeDecoder(c, seq, dtype)
    init_(model, c["layers"])
    tokens, targets = torch.randint(c["vocab"], (2, 2, seq), device=dev)
    got = {}
    for impl in ("grouped", "loop"):
        for block in model.blocks:
            block.moe.impl = impl
        model.zero_grad(set_to_none=True)
        with sdpa_kernel([backend]):
            loss, aux, counts = model(tokens, targets)
        (loss + aux).backward()
        got[impl] = loss.detach(), aux.detach(), counts, {n: p.grad.clone() for n, p in model.named_parameters()}
    (lg, ag, cg, gg), (ll, al, cl, gl) = got["grouped"], got["loop"]
    err = {"loss": rel_err(lg, ll), "aux": rel_err(ag, al), "grad_max": max(rel_err(gg[n], gl[n]) for n in gg),
           "grad_worst": max(gg, key=lambda n: rel_err(gg[n], gl[n])), "routing_equal": bool(torch.equal(cg, cl))}
    with torch.no_grad():  # the layer against the dense reference, on the same input
        moe, x = model.blocks[0].moe, torch.randn(64, c["d"], device=dev, dtype=dtype)
        moe.impl = "grouped"
        p, expert, w = moe.route(x)
        gate, up = torch.einsum("td,efd->etf", x, moe.fc1.weight).chunk(2, dim=-1)
        dense = torch.einsum("etf,edf->etd", F.silu(gate) * up, moe.fc2.weight)  # [E, T, d]
        ref = sum(w[:, j, None] * dense[expert[:, j], torch.arange(64, device=dev)].float() for j in range(moe.k))
        f = F.one_hot(expert, moe.E).sum(dim=(0, 1)).float() / (64 * moe.k)
        y, aux, _ = moe(x)
        err["layer"], err["layer_aux"] = rel_err(y, ref), rel_err(aux, AUX_COEFF * moe.E * (f * p.mean(0)).sum())
        counts = torch.zeros(moe.E, dtype=torch.int64, device=dev)
        counts[::2] = 24  # the odd experts get no rows
        rows = torch.randn(int(counts.sum()), c["d"], device=dev, dtype=dtype)
        err["empty_expert"] = rel_err(*(fn(rows, counts, moe.fc1.weight, moe.fc2.weight)
                                        for fn in (experts_grouped, experts_loop)))
    ok = err["routing_equal"] and all(v <= tol for n, v in err.items() if isinstance(v, float))
    return dict(err, dtype=str(dtype), tolerance=tol, ok=ok)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mixtral-8x7b", choices=PRESETS)
    ap.add_argument("--layers", type=int, help="override the preset's layer count")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20, help="measured steps")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured steps before them")
    ap.add_argument("--routing", default="learned", choices=["learned", "balanced"])
    ap.add_argument("--experts-impl", choices=["grouped", "loop"], help="default: grouped where torch has it")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="default: on for cuda")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: smoke tests only")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--self-check", action="store_true", help="grouped vs loop experts (module docstring), then exit")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.seq < 2 or args.micro_batch < 1:
        ap.error("need --steps >= 1, --warmup >= 0, --seq >= 2, --micro-batch >= 1")
    args.experts_impl = args.experts_impl or ("grouped" if hasattr(torch, "_grouped_mm") else "loop")
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    args.compile = cuda if args.compile is None else args.compile
    c = dict(PRESETS[args.preset], layers=args.layers or PRESETS[args.preset]["layers"], routing=args.routing,
             experts_impl=args.experts_impl)
    L, V, E, s, B = c["layers"], c["vocab"], c["experts"], args.seq, args.micro_batch
    backend, gqa = pick_sdpa(c, s, dev)
    if args.self_check:
        res = self_check(c, s, dev, backend)
        print(json.dumps({"peer": "torch", "bench": "train_moe_self_check", "preset": args.preset, "layers": L,
                          "seq": s, "device": dev.type, "torch": torch.__version__, **res}), flush=True)
        sys.exit(0 if res["ok"] else 1)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(args.seed)
    with torch.device(dev):  # built in place in bf16: no transient fp32 copy in the memory peak
        model = MoeDecoder(c, s, torch.bfloat16)
    init_(model, L)
    for block in model.blocks:
        block.gqa = gqa
    params = list(model.parameters())
    opt = adamw(params, cuda)
    fwd = torch.compile(model) if args.compile else model  # whole model, as torch_train.py (compile_ms: step 1)
    last = {}

    def train_step(tokens, targets):
        with sdpa_kernel([backend]):
            loss, aux, counts = fwd(tokens, targets)
        (loss + aux).backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        last.update(aux=aux.detach(), counts=counts)
        return loss.detach(), norm

    n = args.warmup + args.steps
    gen = torch.Generator(dev).manual_seed(args.seed)
    tokens = torch.randint(V, (n, B, s), generator=gen, device=dev)
    targets = torch.randint(V, (n, B, s), generator=gen, device=dev)
    print(f"# torch {torch.__version__}: {args.preset} L{L} seq {s} micro-batch {B} E{E} top-{c['top_k']} "
          f"routing {args.routing} experts {args.experts_impl} compile {args.compile} sdpa {backend.name} "
          f"gqa {'native' if gqa else 'repeated'}", file=sys.stderr)
    record = measure(args, lambda i: train_step(tokens[i], targets[i]), B * s, cuda, dev)
    counts = last["counts"].float()
    fpt = flops_per_token(c, s)
    expert_params = sum(p.numel() for b in model.blocks for p in (b.moe.fc1.weight, b.moe.fc2.weight))
    print(json.dumps({
        "peer": "torch", "bench": "train", "case": f"{args.preset}/L{L}/s{s}/mb{B}/{args.routing}/{dev.type}",
        "model": args.preset, "layers": L, "seq": s, "micro_batch": B, "global_batch": B, "device": dev.type,
        "state": "bf16", "compile": args.compile, "sdpa": backend.name, "gqa": "native" if gqa else "repeated",
        "experts": E, "top_k": c["top_k"], "expert_ffn": c["ffn"], "routing": args.routing,
        "experts_impl": args.experts_impl, "grouped_gemm": grouped_gemm_name(args.experts_impl, dev),
        "params": sum(p.numel() for p in params),
        "params_active": sum(p.numel() for p in params) - expert_params * (E - c["top_k"]) // E, **record,
        "routing_last_step": {"tokens_per_expert": {"min": counts.min().item(), "mean": counts.mean().item(),
                                                    "max": counts.max().item()},
                              "per_layer": last["counts"].tolist(), "aux_loss": last["aux"].item()},
        "flops_per_token": fpt, "flops_per_step": fpt * B * s, "flop_convention": "dgxc-moe-full",
        "tflops": fpt * B * s / (record["step_ms"]["median"] / 1e3) / 1e12,
        "max_memory_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "command": shlex.join([sys.executable, *sys.argv]),
    }), flush=True)


if __name__ == "__main__":
    main()
