#!/usr/bin/env python3
"""Writes the report's golden inputs (tests/report/golden/*.jsonl): synthetic but plausible records of every kind
the report draws, deterministic (seeded). The run records are real: copied from bench/results (H200) and a CPU
`trainbench train --model tiny --device cpu` run (train-cpu.jsonl, run.json)."""
import json, math, random, os

here = os.path.dirname(os.path.abspath(__file__))
rnd = random.Random(7)
S = "trainbench.result.v1"

def write(name, recs):
    with open(os.path.join(here, name), "w") as f:
        for r in recs:
            f.write(json.dumps(r, sort_keys=True) + "\n")

# Four ranks of 30 measured steps; rank 2 is 18% slower (its GPU held a lower clock: thermal), rank 1 jitters more.
ranks = []
clocks = [1505.0, 1498.0, 1262.0, 1510.0]
for rank in range(4):
    base = 100.0 * (1.18 if rank == 2 else 1.0)
    jit = 6.0 if rank == 1 else 1.5
    steps = [round(base + rnd.gauss(0, jit), 3) for _ in range(30)]
    tel = {"device": rank, "samples": 300, "seconds": 3.0, "power_w_mean": 690.0, "sm_clock_mhz_mean": clocks[rank],
           "sm_clock_mhz_min": clocks[rank] - 120,
           "throttle": ["sw_power_cap", "sw_thermal"] if rank == 2 else ["sw_power_cap"]}
    ranks.append({"schema": S, "run": "20261130T120000Z-golden-0001", "bench": "rank_steps", "case": f"llama3.1-8b/rank{rank}",
                  "world": 4, "status": "ok", "rank": rank, "device": rank, "host": "node01", "step_ms": steps,
                  "telemetry": tel})
write("rank_steps.jsonl", ranks)

# A sweep over micro_batch x recompute: one point skipped (does not fit), one resumed twice (the last wins).
sweep = []
def sp(mb, rc, status="ok", tps=0.0, reason=None, resumed=False):
    r = {"schema": S, "run": "20261130T120500Z-golden-0002", "bench": "sweep.point", "case": f"micro_batch={mb},recompute={rc}",
         "world": 1, "status": status, "sweep": "llama3.1-8b", "point": {"micro_batch": str(mb), "recompute": rc},
         "dir": f"points/micro_batch={mb},recompute={rc}"}
    if status == "ok":
        r.update({"tokens_per_s_per_gpu": tps, "step_s": 128 * 8192 / 8 / tps, "tflops_per_gpu": tps * 57.9e9 / 1e12,
                  "mfu": tps * 57.9e9 / 1e12 / 989, "peak_alloc_gib": 30.0 * mb, "resumed": resumed})
    else:
        r["reason"] = reason
    return r
sweep += [sp(1, "none", tps=11857.0), sp(1, "selective", tps=11420.0), sp(2, "none", tps=12240.0),
          sp(2, "selective", tps=11990.0),
          sp(4, "none", "skipped", reason="llama3.1-8b with 4 layers, seq 8192, micro-batch 4 needs about 151.2 GiB on the GPU; 139.0 GiB are free."),
          sp(4, "selective", tps=12105.0), sp(1, "none", tps=11857.0, resumed=True)]
write("sweep.jsonl", sweep)

# A 1 -> 2 -> 4 -> 8 GPU weak-scaling series: proxy (compute only) and projected (with communication).
scale = []
for n, tps, ptps, comm in [(1, 11900.0, 11900.0, 0.0), (2, 11880.0, 11650.0, 0.012), (4, 11870.0, 11420.0, 0.025),
                           (8, 11857.0, 10638.0, 0.061)]:
    for src, v in (("proxy", tps), ("projected", ptps)):
        r = {"schema": S, "run": "20261130T121000Z-golden-0003", "bench": "scale.point", "case": f"llama3.1-8b/{n}gpus/{src}",
             "world": n, "status": "ok", "recipe": "llama3.1-8b", "gpus": n, "mode": "weak", "source": src,
             "tokens_per_s_per_gpu": v, "step_s": 16 * n * 8192 / n / v}
        if src == "projected":
            r["comm_share"] = comm
        scale.append(r)
write("scale.jsonl", scale)

# NVML series of two GPUs over 60 s, and an NCCL all-reduce / all-gather sweep with the check's expectations.
tel = []
for dev in range(2):
    t = [i * 0.5 for i in range(120)]
    tel.append({"schema": S, "run": "20261130T121500Z-golden-0004", "bench": "telemetry.series", "case": f"gpu{dev}",
                "world": 2, "status": "ok", "device": dev, "t_s": t,
                "power_w": [round(120 + 560 * (1 - math.exp(-x / 4)) + rnd.gauss(0, 8) - 15 * dev, 1) for x in t],
                "sm_clock_mhz": [1980 if x < 20 else 1830 - 10 * dev for x in t],
                "temp_c": [round(35 + 30 * (1 - math.exp(-x / 25)) + dev, 1) for x in t]})
write("telemetry.jsonl", tel)

check = []
for op, peak in (("all_reduce", 340.0), ("all_gather", 280.0)):
    for k in range(20, 31):
        size = 1 << k
        bus = peak * size / (size + 16e6)
        check.append({"schema": S, "run": "20261130T121500Z-golden-0004", "bench": f"micro.nccl.{op}", "case": f"f32/{size}",
                      "world": 2, "status": "ok", "bytes": size, "count": size // 4, "algbw_gbps": bus / (2 * 0.5 if op == "all_reduce" else 1) ,
                      "busbw_gbps": round(bus, 2), "time_us": {"median": size / bus / 1e3, "n": 20}, "verified": True})
    check.append({"schema": S, "run": "20261130T121500Z-golden-0004", "bench": "check", "case": f"micro.nccl.{op}/f32/1GiB",
                  "world": 2, "status": "ok", "verdict": "pass", "metric": "busbw_gbps", "value": round(peak * 0.985, 1),
                  "expected_min": 310.0 if op == "all_reduce" else 254.0, "note": ""})
write("check.jsonl", check)
