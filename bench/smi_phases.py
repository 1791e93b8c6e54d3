#!/usr/bin/env python3
"""smi_phases.py: mean GPU power, SM clock and power-cap share per run, from an nvidia-smi log and run marks.

Inputs: SMI, the CSV of `nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,temperature.gpu,
clocks_event_reasons.sw_power_cap --format=csv,noheader -lms 100` running beside the runs, and MARKS, lines
"HH:MM:SS.fff start|end NAME" written around each run (same clock, UTC). Per run: the samples inside its window with
power above --min-w (default 450 W: the busy part, not start-up or compilation), their mean power and SM clock, and the
share of them with the software power cap active. Under a power cap the clock is what a program's power per cycle
leaves it: two programs at the same cap and different clocks spend different energy per cycle.

Usage: smi_phases.py SMI.csv[.gz] MARKS.txt [--min-w 450]
"""
import argparse
import datetime
import gzip


def seconds(hms):
    h, m, s = hms.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("smi")
    ap.add_argument("marks")
    ap.add_argument("--min-w", type=float, default=450)
    a = ap.parse_args()
    rows = []
    for line in (gzip.open(a.smi, "rt") if a.smi.endswith(".gz") else open(a.smi)):
        p = [x.strip() for x in line.split(",")]
        if len(p) < 5:
            continue
        try:
            t = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f")
            rows.append((t.hour * 3600 + t.minute * 60 + t.second + t.microsecond / 1e6, float(p[1].split()[0]),
                         float(p[2].split()[0]), p[4] == "Active"))
        except ValueError:
            continue  # a line nvidia-smi could not fill ([N/A])
    windows = {}
    for line in open(a.marks):
        ts, what, name = line.split()
        windows.setdefault(name, {})[what] = seconds(ts)
    for name, w in windows.items():
        sel = [r for r in rows if w.get("start", 0) <= r[0] <= w.get("end", 0) and r[1] > a.min_w]
        if not sel:
            print(f"{name:16s} no samples above {a.min_w:.0f} W")
            continue
        n = len(sel)
        print(f"{name:16s} {n:4d} samples  power {sum(r[1] for r in sel) / n:6.1f} W  SM clock "
              f"{sum(r[2] for r in sel) / n:5.0f} MHz  power cap active {sum(r[3] for r in sel) / n:4.0%}")


if __name__ == "__main__":
    main()
