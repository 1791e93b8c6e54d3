#!/usr/bin/env python3
"""torch_nccl.py: the PyTorch peer of `trainbench micro nccl`: torch.distributed (NCCL backend), one
process per GPU, float32, out of place where the API allows it; sizes and busbw exactly as
nccl-tests (all_reduce 2(n-1)/n, all_gather / reduce_scatter / alltoall (n-1)/n).
Run: torchrun --nproc_per_node=N bench/peers/torch_nccl.py [--sizes 64M,256M,1G]
"""
import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="64M,256M,1G")
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    for size in map(parse_size, args.sizes.split(",")):
        count = size // 4 // world * world
        cases = {
            "all_reduce": (lambda x=torch.rand(count, device="cuda"): dist.all_reduce(x), 2 * (world - 1) / world, count * 4),
            "all_gather": (lambda o=torch.empty(count, device="cuda"), i=torch.rand(count // world, device="cuda"):
                           dist.all_gather_into_tensor(o, i), (world - 1) / world, count * 4),
            "reduce_scatter": (lambda o=torch.empty(count // world, device="cuda"), i=torch.rand(count, device="cuda"):
                               dist.reduce_scatter_tensor(o, i), (world - 1) / world, count * 4),
            "alltoall": (lambda o=torch.empty(count, device="cuda"), i=torch.rand(count, device="cuda"):
                         dist.all_to_all_single(o, i), (world - 1) / world, count * 4),
        }
        for name, (fn, factor, nbytes) in cases.items():
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            times = []
            for _ in range(args.iters):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                torch.cuda.synchronize()
                times.append(s.elapsed_time(e))
            t = torch.tensor([statistics.median(times)], device="cuda")
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            algbw = nbytes / (t.item() * 1e-3) / 1e9
            if rank == 0:
                print(json.dumps({"peer": "torch.distributed", "bench": f"micro.nccl.{name}", "world": world,
                                  "bytes": nbytes, "algbw_gbps": algbw, "busbw_gbps": algbw * factor}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
