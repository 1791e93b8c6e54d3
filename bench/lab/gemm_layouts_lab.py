#!/usr/bin/env python3
"""gemm_layouts_lab.py: does a linear layer's backward GEMM run slower than its forward only because of its operand
layout? Times, with PyTorch's cuBLAS on one GPU, the three GEMMs of y = x W^T at the Llama 3.1 8B / 70B layer shapes
(T tokens, W [out, in] row-major) in the layouts a training step uses and in the forward's layout (cuBLAS TN, both
operands contiguous along the reduction) with the operands pre-transposed:
  fwd    y  = x W^T            x [T, in], W [out, in]               (TN: both K-contiguous)
  dgrad  dx = dy W             dy [T, out], W [out, in]             (NN)   vs  dy (W^T)^T with W^T [in, out] stored (TN)
  wgrad  dW = dy^T x           dy [T, out], x [T, in]               (NT)   vs  (dy^T)(x^T)^T with both transposed (TN)
Every case runs sustained (warmed for --warm-ms of GPU time so it is timed at the clock its load settles to under the
power limit), then --iters timed back to back; FLOPs 2·T·out·in. Prints TFLOP/s per case and the ratio to the forward.
"""
import argparse
import torch


def sustained(fn, warm_ms, iters):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spent = 0.0
    while spent < warm_ms:  # warm until the clock settles
        start.record()
        for _ in range(5):
            fn()
        stop.record()
        torch.cuda.synchronize()
        spent += start.elapsed_time(stop)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iters / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--warm-ms", type=float, default=300)
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    T = args.tokens
    shapes = {  # name: (out, in)
        "8b qkv": (6144, 4096), "8b out": (4096, 4096), "8b fc1": (28672, 4096), "8b fc2": (4096, 14336),
        "70b qkv": (10240, 8192), "70b fc1": (57344, 8192), "70b fc2": (8192, 28672), "lm head": (128256, 4096),
    }
    g = torch.Generator("cuda").manual_seed(1)
    rnd = lambda *s: torch.rand(*s, device="cuda", generator=g, dtype=torch.bfloat16) * 2 - 1  # uniform [-1, 1]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, T {T}, bf16, warm {args.warm_ms} ms")
    print(f"{'shape':10} {'fwd TN':>8} {'dgrad NN':>9} {'dgrad TN':>9} {'wgrad NT':>9} {'wgrad TN':>9}   TFLOP/s; "
          "ratios to fwd")
    for name, (o, i) in shapes.items():
        x, w, dy = rnd(T, i), rnd(o, i), rnd(T, o)
        wt, dyt, xt = w.t().contiguous(), dy.t().contiguous(), x.t().contiguous()
        cases = {
            "fwd TN": lambda: x @ w.t(),
            "dgrad NN": lambda: dy @ w,
            "dgrad TN": lambda: dy @ wt.t(),
            "wgrad NT": lambda: dy.t() @ x,
            "wgrad TN": lambda: dyt @ xt.t(),
        }
        tf = {k: 2 * T * o * i / sustained(f, args.warm_ms, args.iters) / 1e12 for k, f in cases.items()}
        ratios = " ".join(f"{tf[k] / tf['fwd TN']:.3f}" for k in cases if k != "fwd TN")
        print(f"{name:10} " + " ".join(f"{tf[k]:9.1f}" for k in cases) + f"   {ratios}", flush=True)
        del x, w, dy, wt, dyt, xt


if __name__ == "__main__":
    main()
