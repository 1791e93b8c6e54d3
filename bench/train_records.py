"""train_records.py: the `trainbench train` record of a results folder (the first JSONL record with bench "train" in
FOLDER/*.jsonl), for the bench scripts that read runs: train_ratios.py, accuracy_runs.py, compare_losses.py; and
normalized(record), which reads records written before the units were made one (docs/METRICS.md, "Older records"):
times in ms under `<name>_ms` (older: seconds under `<name>_s`, e.g. the PyTorch peers' step_s statistics), MFU as a
fraction `mfu` (older: `mfu_pct`), the layout as an object {dp, cp, pp, tp, vp, sequence_parallel} (older: the
string "dp1 cp1 pp1 tp2 vp1 sp")."""
import glob
import json
import os
import re

_SECONDS = ("step", "compile", "microbatch", "optimizer")  # <name>_s -> <name>_ms


def _to_ms(v):
    if isinstance(v, dict):
        return {k: (x * 1e3 if isinstance(x, (int, float)) and k != "n" else x) for k, x in v.items()}
    return v * 1e3 if isinstance(v, (int, float)) else v


def normalized(r):
    """A copy of record r with the current keys: <name>_ms from <name>_s, mfu from mfu_pct, layout as an object."""
    r = dict(r)
    for name in _SECONDS:
        if name + "_s" in r and name + "_ms" not in r:
            r[name + "_ms"] = _to_ms(r.pop(name + "_s"))
    if "mfu_pct" in r and "mfu" not in r and isinstance(r["mfu_pct"], (int, float)):
        r["mfu"] = r.pop("mfu_pct") / 100
    if isinstance(r.get("layout"), str):
        lay = {"sequence_parallel": False}
        for word in r["layout"].split():
            m = re.fullmatch(r"(dp|cp|pp|tp|vp)(\d+)", word)
            if m:
                lay[m.group(1)] = int(m.group(2))
            elif word == "sp":
                lay["sequence_parallel"] = True
        r["layout"] = lay
    return r


def train_record(folder):
    """The folder's train record as a dict (normalized), or None when it has none."""
    for path in sorted(glob.glob(os.path.join(folder, "*.jsonl"))):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("bench") == "train":
                    return normalized(r)
    return None
