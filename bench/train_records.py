"""train_records.py: the `trainbench train` record of a results folder (the first JSONL record with bench "train" in
FOLDER/*.jsonl), for the bench scripts that read runs: train_ratios.py, accuracy_runs.py, compare_losses.py."""
import glob
import json
import os


def train_record(folder):
    """The folder's train record as a dict, or None when it has none."""
    for path in sorted(glob.glob(os.path.join(folder, "*.jsonl"))):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("bench") == "train":
                    return r
    return None
