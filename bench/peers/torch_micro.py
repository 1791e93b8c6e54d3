#!/usr/bin/env python3
"""torch_micro.py: the PyTorch peer of `trainbench micro gemm|membw`, run on the same GPU in the same job.

gemm:  torch.matmul (bf16, f16, tf32) and torch._scaled_mm (e4m3 x e4m3 -> bf16, fast accumulation)
       on random inputs, D[m,n] = A[m,k] B[n,k]^T; TFLOP/s = 2 m n k / median time.
membw: device-to-device copy (tensor.copy_), TB/s = 2 x bytes / median time (read + write).
Timing: CUDA events around each iteration after warmup, median (as trainbench's bench/loop does).
Prints one JSON object per case on stdout.
"""
import argparse
import json
import statistics

import torch


def time_ms(fn, warmup=10, iters=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def gemm(dtype, n):
    m = k = n
    if dtype == "e4m3":
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device="cuda")
        fn = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True)
    else:
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        t = {"bf16": torch.bfloat16, "f16": torch.float16, "tf32": torch.float32}[dtype]
        a = torch.randn(m, k, device="cuda", dtype=t)
        b = torch.randn(n, k, device="cuda", dtype=t)
        fn = lambda: torch.matmul(a, b.t())
    ms = time_ms(fn)
    return {"peer": "torch", "bench": "micro.gemm", "case": f"{dtype}/{m}x{n}x{k}", "tflops": 2 * m * n * k / ms / 1e9}


def membw(nbytes):
    a = torch.rand(nbytes // 4, device="cuda")
    b = torch.empty_like(a)
    ms = time_ms(lambda: b.copy_(a), warmup=5, iters=30)
    return {"peer": "torch", "bench": "micro.membw", "case": f"copy/{nbytes >> 30}GiB", "tbps": 2 * nbytes / ms / 1e9}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="8192", help="GEMM cube sizes, comma separated")
    p.add_argument("--dtypes", default="bf16,f16,tf32,e4m3")
    args = p.parse_args()
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    for n in map(int, args.sizes.split(",")):
        for d in args.dtypes.split(","):
            print(json.dumps(gemm(d, n)), flush=True)
    print(json.dumps(membw(1 << 30)), flush=True)
