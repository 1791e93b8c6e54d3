#!/usr/bin/env python3
"""tests/fault/fuzz.py: hostile input to trainbench (ctest label cpu; about half a minute on 2 cores).

  fuzz.py TRAINBENCH [SEED] [CASES]

Random command lines (bad numbers, unknown flags, empty, huge, not UTF-8, control characters), mutated recipes,
references and results files (lines cut, bytes flipped, values of the wrong type, huge values, control characters),
each run with a time limit. Holds when: nothing escapes as an internal error or a crash (exit 0, 1 or 2 only; no
"internal error", no "json.exception" on stderr), input that is bad by construction exits non-zero, no run hangs,
and a manifest or batch script rendered from random values parses to what was asked (one MPIJob, or with --proxies a Service and an indexed Job; `bash -n`
and #SBATCH lines only before the shell body). Exit 0 when all hold, 1 with the failures listed (and the seed).
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

TB = os.path.abspath(sys.argv[1])
SEED = int(sys.argv[2]) if len(sys.argv) > 2 else int(time.time())
CASES = int(sys.argv[3]) if len(sys.argv) > 3 else 60
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
rng = random.Random(SEED)
ROOT = tempfile.mkdtemp(prefix="tb-fuzz-")
failures = []
counts = {"runs": 0}

try:
    import yaml
except ImportError:
    yaml = None

HOSTILE = ["", "0", "-1", "-0", "1e9", "99999999999999999999", "134217728", "2147483648", "nan", "inf", "abc",
           "1.5", " 3", "\n", "x\ny", "a\rb", "\x1b[2J", "'", '"', "$(touch PWNED)", "`id`", "; rm -rf x", "%s%n",
           "../../etc", "/", ".", "a" * 5000, "\u00e9", "\ufeff", "--", "-", "=", "k=", "=v", "layers=0",
           "layers=-4", "seq=99999999999", "tp=0"]
BAD_UTF8 = [b"\xff", b"caf\xe9", b"\xc0\xaf", b"\xed\xa0\x80"]


def fail(what):
    failures.append(what)
    print("FAIL " + what, flush=True)


def run(args, must_fail=False, timeout=60, what=None):
    counts["runs"] += 1
    what = what or " ".join(repr(a) for a in args)[:300]
    try:
        p = subprocess.run([TB.encode()] + [a if isinstance(a, bytes) else a.encode("utf-8", "surrogateescape")
                                            for a in args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, cwd=ROOT,
                           env=dict(os.environ, TRAINBENCH_RECIPES=os.path.join(REPO, "recipes")))
    except subprocess.TimeoutExpired:
        fail("hang ({} s): {}".format(timeout, what))
        return None
    err = p.stderr.decode(errors="replace")
    if p.returncode not in (0, 1, 2):
        fail("exit {}: {}\n{}".format(p.returncode, what, err[-500:]))
    if "internal error" in err or "json.exception" in err or "terminate called" in err:
        fail("escaped exception: {}\n{}".format(what, err[-500:]))
    if must_fail and p.returncode == 0:
        fail("exit 0 on bad input: {}".format(what))
    return p


INT_FLAGS = {
    "train": ["--layers", "--seq", "--micro-batch", "--global-batch", "--steps", "--warmup-steps", "--tp", "--pp",
              "--cp", "--vp", "--ep", "--gpus", "--seed", "--fp8-history"],
    "project": ["--gpus"],
    "k8s": ["--nodes", "--gpus-per-node", "--tasks-per-node"],
}


def fuzz_cli():
    base = {"train": ["train", "--model", "tiny", "--device", "cpu", "--steps", "2", "--warmup-steps", "1"],
            "project": ["project", "tiny", "--gpus", "8"],
            "k8s": ["k8s", "render", "tiny", "--nodes", "1", "--device", "cpu", "--image", "img"]}
    for _ in range(CASES):
        cmd = rng.choice(list(base))
        args = list(base[cmd])
        kind = rng.random()
        if kind < 0.4:  # a number flag with a value that is not a number in range
            flag = rng.choice(INT_FLAGS[cmd])
            value = rng.choice(["0", "-1", "abc", "1.5", "99999999999999999999", "", "1e3", "\n"]) \
                if flag not in ("--seed", "--warmup-steps") else rng.choice(["abc", "1.5", "-1e3", ""])
            run(args + [flag, value], must_fail=True)
        elif kind < 0.55:
            run(args + ["--" + rng.choice(["nope", "stpes", "out-dir", "x"]), "1"], must_fail=True)
        elif kind < 0.7:
            a = list(args)
            a.insert(rng.randrange(1, len(a) + 1), rng.choice(BAD_UTF8))
            run(a, must_fail=True)
        elif kind < 0.85 and cmd == "train":
            run(args + ["--out", rng.choice(["/", "", "/proc/x", "/dev/null"])], must_fail=True)
        else:  # anything at all: no crash, no escaped exception
            a = list(args)
            for _ in range(rng.randint(1, 3)):
                a.insert(rng.randrange(1, len(a) + 1), rng.choice(HOSTILE))
            p = run(a, timeout=90)
            if p is not None and p.returncode == 0 and cmd == "k8s":
                check_manifest(p.stdout, a)


def check_manifest(text, args):
    if yaml is None:
        return
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        fail("manifest does not parse: {}: {}".format(args, e))
        return
    want = 2 if "--proxies" in args and "--mpi-operator" not in args else 1  # Service + indexed Job, or an MPIJob
    if len(docs) != want:
        fail("manifest has {} documents, expected {}: {}".format(len(docs), want, args))


def fuzz_generated():
    for _ in range(CASES // 2):
        v = rng.choice(HOSTILE + ["ok-name", "team-a", "a.b", "x\n---\nkind: ConfigMap"])
        flag = rng.choice(["--namespace", "--results-pvc", "--name", "--image"])
        args = ["k8s", "render", "tiny", "--nodes", "1", "--device", "cpu", "--image", "img", flag, v]
        args += rng.choice([[], ["--proxies"], ["--proxies", "--mpi-operator"]])
        p = run(args)
        if p is not None and p.returncode == 0:
            check_manifest(p.stdout, args)
        sb = rng.choice(HOSTILE + ["--qos=high", "--comment=a b", "--qos=x\ntouch PWNED"])
        args = ["slurm", "run", "tiny", "--nodes", "1", "--device", "cpu", "--dry-run", "--trainbench", "/opt/tb",
                "--out", os.path.join(ROOT, "slurm"), "--sbatch=" + sb]
        p = run(args, must_fail="\n" in sb or "\r" in sb)
        if p is not None and p.returncode == 0:
            check_script(p.stdout.decode(), args)


def check_script(text, args):
    f = os.path.join(ROOT, "job.sbatch")
    with open(f, "w") as out:
        out.write(text)
    if subprocess.run(["bash", "-n", f], stderr=subprocess.DEVNULL).returncode != 0:
        fail("script does not parse: {}".format(args))
    lines = text.split("\n")
    for i, line in enumerate(lines[1:], 2):
        if line == "set -uo pipefail":
            break
        if not (re.match(r"#SBATCH (--[A-Za-z][A-Za-z0-9_-]*(=|$)|-[A-Za-z])", line) or line.startswith("# ")):
            fail("script line {} is outside the directives: {!r} ({})".format(i, line, args))


def mutate_text(text):
    lines = text.split("\n")
    m = rng.random()
    if m < 0.2 and lines:
        del lines[rng.randrange(len(lines))]
    elif m < 0.4 and lines:
        i = rng.randrange(len(lines))
        if "=" in lines[i]:
            k = lines[i].split("=")[0]
            lines[i] = k + "= " + rng.choice(['"x"', "-1", "0", "99999999999999999999", "[1, 2]", "{a = 1}", "true",
                                              '"\\u0000"', "1e400", '"\\n---"'])
    elif m < 0.55:
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(["bogus_key = 1", "[bogus]", "=", "[[layout]]"]))
    elif m < 0.7:
        return text[:rng.randrange(len(text) + 1)]
    elif m < 0.85:
        b = bytearray(text.encode())
        for _ in range(rng.randint(1, 5)):
            if b:
                b[rng.randrange(len(b))] = rng.randrange(256)
        return b.decode("latin-1")
    else:
        return text * rng.randint(2, 50)
    return "\n".join(lines)


def fuzz_recipes():
    with open(os.path.join(REPO, "recipes", "tiny.toml")) as f:
        tiny = f.read()
    d = os.path.join(ROOT, "recipes")
    for _ in range(CASES // 2):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        text = mutate_text(tiny)
        with open(os.path.join(d, "tiny.toml"), "w", encoding="latin-1") as f:
            f.write(text)
        bad = "bogus" in text
        run(["list", "recipes", "--recipes", d], must_fail=bad, what="list recipes on a mutated tiny.toml")
        run(["k8s", "render", "tiny", "--nodes", "1", "--device", "cpu", "--image", "i", "--recipes", d],
            must_fail=bad, what="k8s render on a mutated tiny.toml")


def fuzz_references():
    src = os.path.join(REPO, "references", "measured-cpu.toml")
    with open(src) as f:
        ref = f.read()
    d = os.path.join(ROOT, "references")
    for _ in range(CASES // 3):
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(os.path.join(REPO, "references"), d)
        with open(os.path.join(d, "measured-cpu.toml"), "w", encoding="latin-1") as f:
            f.write(mutate_text(ref))
        run(["list", "references", "--references", d], what="list references on a mutated measured-cpu.toml")


RECORD = {"schema": "trainbench.result.v1", "run": "r1", "bench": "run", "case": "tiny", "world": 1, "status": "ok",
          "recipe": "tiny", "precision": "fp32", "backend": "cpu",
          "extrapolated": {"tokens_per_s_per_gpu": 1000.0, "step_ms": 100.0}, "tflops_per_gpu": 0.001, "mfu": 0.0,
          "layout": {"gpus": 1, "tp": 1, "pp": 1, "cp": 1, "micro_batch": 2, "global_batch": 4, "layers": 2,
                     "seq": 64}}


def wrong_type(j):
    j = json.loads(json.dumps(j))
    key = rng.choice(["world", "status", "extrapolated", "tflops_per_gpu", "mfu", "schema", "bench", "run"])
    j[key] = rng.choice(["x", [], {}, None, True, -1, 1e308]) if key != "extrapolated" else {"step_ms": "slow"}
    return j


def schema_allows(j):
    """Whether a record passes trainbench.result.v1 as core/record.h states it: a measured value (a unit in its key)
    is a number, null (NaN) or a list of them; the fixed keys have their types."""
    def measured(v):
        return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) or \
            (isinstance(v, list) and all(measured(x) for x in v)) or \
            (isinstance(v, dict) and v and all(measured(x) for x in v.values()))
    return (isinstance(j.get("world"), int) and not isinstance(j.get("world"), bool) and j["world"] >= 1 and
            j.get("status") in ("ok", "interrupted") and j.get("schema") == RECORD["schema"] and
            isinstance(j.get("bench"), str) and isinstance(j.get("run"), str) and
            measured(j.get("tflops_per_gpu")) and measured(j.get("mfu")) and
            isinstance(j.get("extrapolated"), dict) and all(measured(x) for x in j["extrapolated"].values()))


def fuzz_results():
    d = os.path.join(ROOT, "results")
    good = json.dumps(RECORD)
    for _ in range(CASES):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        m = rng.random()
        must_fail = False
        if m < 0.3:  # a value of the wrong type in the middle of the file
            j = wrong_type(RECORD)
            body = good + "\n" + json.dumps(j) + "\n" + good + "\n"
            must_fail = not schema_allows(j)
        elif m < 0.5:  # cut by a crash: the last line incomplete (readable)
            body = good + "\n" + good[:rng.randrange(1, len(good) - 1)]
        elif m < 0.7:
            body = mutate_text(good + "\n" + good + "\n")
        elif m < 0.85:  # not records at all
            body = rng.choice(["[1,2]\n", "\"x\"\n", "null\n", "{}\n", "1\n"]) + good + "\n"
            must_fail = True
        else:  # huge
            big = dict(RECORD, note="x" * rng.randint(1000, 200000))
            body = "\n".join(json.dumps(big) for _ in range(rng.randint(1, 20))) + "\n"
        with open(os.path.join(d, "results.jsonl"), "w", encoding="latin-1") as f:
            f.write(body)
        run(["compare", d], must_fail=must_fail, what="compare on {}".format(body.split("\n")[1][:300] if "\n" in body else body[:300]))
        run(["report", d, "--format", rng.choice(["md", "csv", "html"]), "--no-charts", "-o",
             os.path.join(ROOT, "out.txt")], must_fail=must_fail, what="report on {}".format(body.split("\n")[1][:300] if "\n" in body else body[:300]))
        if rng.random() < 0.3:
            with open(os.path.join(d, "run.json"), "w") as f:
                f.write(rng.choice(["[]", "{\"schema\":\"trainbench.run.v1\",\"run\":1}", "{", "null",
                                    "{\"schema\":\"trainbench.run.v1\",\"run\":\"r\",\"argv\":\"x\"}"]))
            run(["report", d, "--format", "md", "-o", os.path.join(ROOT, "out.md")], must_fail=True,
                what="report with a bad run.json")


def main():
    print("fuzz.py seed {} cases {}".format(SEED, CASES), flush=True)
    t0 = time.time()
    try:
        fuzz_cli()
        fuzz_generated()
        fuzz_recipes()
        fuzz_references()
        fuzz_results()
        if os.path.exists(os.path.join(ROOT, "PWNED")):
            fail("a generated value ran as a command (PWNED exists)")
    finally:
        shutil.rmtree(ROOT, ignore_errors=True)
    print("fuzz.py: {} runs, {} failures in {:.0f} s (seed {})".format(counts["runs"], len(failures), time.time() - t0,
                                                                      SEED))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
