#!/usr/bin/env python3
"""tests/fault/faults.py: signals at random moments of CPU runs (ctest label cpu; about a minute on 2 cores).

  faults.py TRAINBENCH [SEED]

For one-rank `train`, a 2-rank `mpirun ... train --device cpu`, `sweep` and `scale`, each of SIGKILL, SIGINT and
SIGTERM at a random moment after the run has started measuring (and SIGSTOP of one rank under mpirun): the run ends
within its time limit (no hang), every results file is valid JSON Lines of trainbench.result.v1 records afterwards, every step
measured before the signal is in a "train.step" record, a stopped run's records are marked interrupted (one per
rank under mpirun), a signalled sweep or scaling study leaves no child running. Exit 0 when all hold, 1 with the failures listed.
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TB = os.path.abspath(sys.argv[1])
SEED = int(sys.argv[2]) if len(sys.argv) > 2 else int(time.time())
rng = random.Random(SEED)
failures = []
ROOT = tempfile.mkdtemp(prefix="tb-faults-")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
TRAIN = [TB, "train", "--model", "tiny", "--device", "cpu", "--steps", "100000", "--warmup-steps", "1",
         "--seq", "16", "--no-op-profile"]


def fail(what):
    failures.append(what)
    print("FAIL " + what, flush=True)


def records(path, where):
    """The records of a results file, checked: every line whole JSON, an object of trainbench.result.v1."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\n"):
        fail("{}: {} does not end with a newline (a partial record)".format(where, path))
    for n, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            j = json.loads(line)
        except ValueError as e:
            fail("{}: {}:{}: not JSON: {}".format(where, path, n, e))
            continue
        if not isinstance(j, dict) or j.get("schema") != "trainbench.result.v1":
            fail("{}: {}:{}: not a record".format(where, path, n))
            continue
        out.append(j)
    return out


def all_results(d, where):
    recs = []
    for base, _, files in os.walk(d):
        for f in files:
            if f.endswith(".jsonl"):
                recs += records(os.path.join(base, f), where)
    return recs


def wait_for(pred, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def step_count(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b'"bench":"train.step"')
    except OSError:
        return 0


def finish(p, timeout, where):
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        fail("{}: still running {} s after the signal (a hang)".format(where, timeout))
        os.killpg(p.pid, signal.SIGKILL)
        return p.wait()


def descendants(pid):
    """Process ids below pid (from /proc)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/{}/stat".format(d)) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def alive(pid):
    try:
        with open("/proc/{}/stat".format(pid)) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def one_rank(sig):
    where = "train, 1 rank, {}".format(signal.Signals(sig).name)
    d = os.path.join(ROOT, "one-{}".format(sig))
    p = subprocess.Popen(TRAIN + ["--out", d], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         start_new_session=True, env=ENV)
    res = os.path.join(d, "results.jsonl")
    if not wait_for(lambda: step_count(res) >= 3, 60):
        fail(where + ": no step records within 60 s")
    time.sleep(rng.uniform(0, 0.3))
    seen = step_count(res)
    p.send_signal(sig)
    rc = finish(p, 20, where)
    recs = all_results(d, where)
    steps = [r for r in recs if r["bench"] == "train.step"]
    if len(steps) < seen:
        fail("{}: {} step records after the signal, {} before".format(where, len(steps), seen))
    if sig == signal.SIGKILL:
        # The next run into the same folder appends after whatever the kill left: the file stays valid.
        with open(res, "ab") as f:
            f.write(b'{"schema":"trainbench.result.v1","run":"x","bench":"tra')  # as if killed mid-write
        q = subprocess.run(TRAIN[:6] + ["--steps", "2", "--warmup-steps", "1", "--out", d], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=60, env=ENV)
        if q.returncode != 0 or b"incomplete" not in q.stderr:
            fail("{}: rerun into the folder: rc {}, {}".format(where, q.returncode, q.stderr[-300:]))
        all_results(d, where + ", rerun")
        return
    if rc != 1:
        fail("{}: exit {}, expected 1 (interrupted)".format(where, rc))
    train = [r for r in recs if r["bench"] == "train"]
    if len(train) != 1 or train[0]["status"] != "interrupted":
        fail("{}: expected one train record marked interrupted, got {}".format(where, [r["status"] for r in train]))
    elif len(train[0]["loss"]) != len(steps):
        fail("{}: the train record has {} steps, the step records {}".format(where, len(train[0]["loss"]), len(steps)))


def mpirun(extra, d):
    return subprocess.Popen(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"] + TRAIN + extra +
                            ["--out", d], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, env=ENV)


def ranks_of(p):
    return [k for k in descendants(p.pid) if open("/proc/{}/cmdline".format(k), "rb").read().startswith(
        TB.encode())]


def two_ranks(sig):
    where = "mpirun -np 2 train, {} to rank 1 only".format(signal.Signals(sig).name)
    d = os.path.join(ROOT, "mpi-{}".format(sig))
    p = mpirun(["--comm-timeout", "5"], d)
    res = os.path.join(d, "results.jsonl")
    if not wait_for(lambda: step_count(res) >= 3, 90):
        fail(where + ": no step records within 90 s")
    ranks = ranks_of(p)
    if len(ranks) != 2:
        fail("{}: found ranks {}".format(where, ranks))
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return
    time.sleep(rng.uniform(0, 0.3))
    t0 = time.time()
    os.kill(max(ranks), sig)
    rc = finish(p, 30, where)
    took = time.time() - t0
    err = p.stderr.read().decode(errors="replace")
    recs = all_results(d, where)
    if sig == signal.SIGSTOP:
        if rc == 0 or "did not finish within" not in err:
            fail("{}: exit {} after {:.1f} s, no watchdog message: {}".format(where, rc, took, err[-400:]))
        return
    if sig == signal.SIGKILL:
        if rc == 0:
            fail(where + ": exit 0")
        return
    if rc != 1:
        fail("{}: exit {} after {:.1f} s, expected 1 (interrupted): {}".format(where, rc, took, err[-400:]))
    per_rank = [r for r in recs if r["bench"] == "rank_steps"]
    if sorted(r["status"] for r in per_rank) != ["interrupted", "interrupted"]:
        fail("{}: rank records {}".format(where, [(r["case"], r["status"]) for r in per_rank]))
    train = [r for r in recs if r["bench"] == "train"]
    if len(train) != 1 or train[0]["status"] != "interrupted":
        fail("{}: train records {}".format(where, [r["status"] for r in train]))


def study(kind, sig):
    """A sweep or a scaling study signalled in its parent process while a point runs as its child."""
    where = "{}, {}".format(kind, signal.Signals(sig).name)
    d = os.path.join(ROOT, "{}-{}".format(kind, sig))
    grid = ["--vary", "micro_batch=1,2,4"] if kind == "sweep" else ["--gpus", "1,2,4", "--no-project"]
    p = subprocess.Popen([TB, kind, "tiny", "--device", "cpu"] + grid + ["--steps", "100000", "--warmup-steps", "1",
                          "--out", d], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                         env=ENV)
    if not wait_for(lambda: len(descendants(p.pid)) > 0, 30):
        fail(where + ": no point started within 30 s")
    time.sleep(rng.uniform(0.5, 1.5))
    kids = descendants(p.pid)
    os.kill(p.pid, sig)  # the sweep process only, as `kill` would
    rc = finish(p, 30, where)
    if not wait_for(lambda: not any(alive(k) for k in kids), 10):
        fail("{}: its point runs outlived it: {}".format(where, [k for k in kids if alive(k)]))
        for k in kids:
            if alive(k):
                os.kill(k, signal.SIGKILL)
    if sig != signal.SIGKILL and rc != 1:
        fail("{}: exit {}, expected 1 (interrupted)".format(where, rc))
    all_results(d, where)


def main():
    print("faults.py seed {}".format(SEED), flush=True)
    t0 = time.time()
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            one_rank(sig)
        if shutil.which("mpirun"):
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGSTOP):
                two_ranks(sig)
        else:
            print("skip mpirun cases: no mpirun")
        for kind in ("sweep", "scale"):
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
                study(kind, sig)
    finally:
        shutil.rmtree(ROOT, ignore_errors=True)
    print("faults.py: {} failures in {:.0f} s (seed {})".format(len(failures), time.time() - t0, SEED))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
