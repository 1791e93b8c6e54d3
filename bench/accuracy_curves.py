#!/usr/bin/env python3
"""accuracy_curves.py: the loss curves of the FP8 accuracy runs (bench/train_acceptance.sh's accuracy modes), one
PNG per data set, drawn by gnuplot.

Each run's loss is smoothed by a trailing mean over --window steps (one step's loss is one batch: noisy). Top panel:
each precision's smoothed loss, averaged over the seeds (log scale). Bottom panel: d(t) = smoothed loss / smoothed
BF16 loss of the same seed - 1, averaged over the seeds, between the FP8 accuracy bounds +-tol. At the last step d is
accuracy_table.py's difference with --last = --window; it is printed per precision.

Usage: accuracy_curves.py RESULTS --tag TAG --out PREFIX [--window 50] [--tol 0.015] [--title TEXT]
Writes PREFIX-DATA.png per data set (gnuplot with pngcairo and DejaVu fonts: scripts/setup.sh installs them)."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import accuracy_runs

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("results")
ap.add_argument("--tag", default="acc")
ap.add_argument("--out", required=True, help="PNG path prefix: PREFIX-DATA.png")
ap.add_argument("--window", type=int, default=50)
ap.add_argument("--tol", type=float, default=0.015)
ap.add_argument("--title", default="")
a = ap.parse_args()
if a.window < 1:
    sys.exit("--window must be at least 1")


def trailing_mean(xs, w):
    out, total = [], 0.0
    for i, x in enumerate(xs):
        total += x - (xs[i - w] if i >= w else 0.0)
        out.append(total / min(i + 1, w))
    return out


def quoted(text):  # a gnuplot string in single quotes
    return "'" + text.replace("'", "''") + "'"


runs = accuracy_runs.load(a.results, a.tag, a.window)
with tempfile.TemporaryDirectory() as tmp:
    for data in sorted({d for d, _, _ in runs}):
        seeds, precisions = accuracy_runs.seeds_and_precisions(runs, data)
        missing = [s for s in seeds if (data, s, "bf16") not in runs]
        if missing:
            sys.exit(f"{data}: no BF16 run for seed(s) {missing}: every difference is to BF16 of the same seed")
        smooth = {(s, p): trailing_mean(runs[(d, s, p)], a.window) for d, s, p in runs if d == data}
        steps = min(len(v) for v in smooth.values())
        columns = []  # per precision: (mean loss, mean d) over the seeds that ran it
        print(f"{data}: difference to BF16 over the last {a.window} steps, mean over the seeds")
        for p in precisions:
            have = [s for s in seeds if (s, p) in smooth]
            loss = [statistics.mean(smooth[(s, p)][t] for s in have) for t in range(steps)]
            diff = [statistics.mean(smooth[(s, p)][t] / smooth[(s, "bf16")][t] - 1 for s in have)
                    for t in range(steps)]
            columns.append((loss, diff))
            if p != "bf16":
                print(f"  {p.replace('_', ' ')}: {diff[-1]:+.2%} ({len(have)} seeds)")
        table = os.path.join(tmp, "curves.dat")
        with open(table, "w") as f:
            for t in range(steps):
                f.write(f"{t + 1} " + " ".join(f"{loss[t]:.6g}" for loss, _ in columns) + " " +
                        " ".join(f"{100 * diff[t]:.6g}" for _, diff in columns) + "\n")
        n = len(precisions)
        names = [p.replace("_", " ") for p in precisions]
        png = f"{a.out}-{data}.png"
        title = a.title or f"{a.tag}: {data}, {len(seeds)} seeds"
        # One colour per precision in both panels; the key in the top panel only.
        plot_loss = ", ".join(f"{quoted(table)} using 1:{2 + i} with lines lw 1.5 lt {i + 1} title {quoted(names[i])}"
                              for i in range(n))
        plot_diff = ", ".join(f"{quoted(table)} using 1:{2 + n + i} with lines lw 1.5 lt {i + 1} notitle"
                              for i in range(1, n))
        bound = f"{100 * a.tol:g}"
        script = f"""set terminal pngcairo size 900,800 noenhanced font 'DejaVu Sans,10'
set output {quoted(png)}
set grid lc rgb '#dddddd'
set multiplot layout 2,1 title {quoted(title)}
set key inside top right
set ylabel 'loss (trailing mean of {a.window} steps)'
set logscale y
plot {plot_loss}
unset logscale y
set key inside bottom right
set xlabel 'step'
set ylabel 'difference to BF16, same seed (%)'
plot {plot_diff}, {bound} with lines dt 2 lc rgb '#888888' title 'bound +-{bound}%', -{bound} with lines dt 2 \
  lc rgb '#888888' notitle
unset multiplot
"""
        gp = os.path.join(tmp, "curves.gp")
        with open(gp, "w") as f:
            f.write(script)
        try:
            r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
        except FileNotFoundError:
            sys.exit("gnuplot not found: scripts/setup.sh installs it (Debian gnuplot-nox)")
        if r.returncode != 0 or not os.path.getsize(png):
            sys.exit(f"gnuplot failed (exit {r.returncode}) on {png}: {r.stderr.strip()}")
        print(f"  chart: {png}")
