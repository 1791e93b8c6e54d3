#!/usr/bin/env python3
"""process_words.py: fails when the tracked tree speaks of how it was made rather than of the product.

The repository describes trainbench: what it does, how to use it, what it measured (with date, GPU and commit).
Numbered work logs ("session 21", "call 5"), references to a work ticket ("the issue", "the FP8 issue's bound"),
borrowed machines ("a lent H200") and files outside the repository (GPU-NOTES, ../shared/) belong to git history and
the tracker, not to the tree. Run from anywhere: python3 tests/repo/process_words.py [ROOT]; exit 1 on a hit.
"""
import os
import re
import subprocess
import sys

PATTERNS = [
    (r"\bsessions?\b", "a numbered work session"),
    (r"\b(?:call|calls)\s*[0-9]+\b|\bcall[0-9]+\b|\bdevice calls?\b", "a numbered device call"),
    (r"\b(?:the|this|that|an?|its|our)\s+(?:[\w-]+\s+)?issue(?:'s)?\b|\bissues?\s+#?[0-9]+\b", "a work ticket"),
    (r"\blent\b", "a borrowed machine"),
    (r"GPU-NOTES|\.\./shared/|\bDESIGN\.md\b", "a file outside the repository"),
]
REGEX = [(re.compile(p, re.IGNORECASE), why) for p, why in PATTERNS]

# Files whose owners are rewording them: the number of hits each may still have. A file here with fewer hits is
# fine (lower its count); one with more fails like any other file.
PENDING = {
}

SELF = "tests/repo/process_words.py"
SKIP_SUFFIXES = (".png", ".jpg", ".gz", ".tgz", ".u16", ".bin", ".pdf")


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True, capture_output=True).stdout
        return [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked tarball): walk it
        files = []
        for d, subdirs, names in os.walk(root):
            subdirs[:] = [s for s in subdirs if not s.startswith((".", "build", "results", "carry"))]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


def scan(root):
    hits = {}
    for rel in tracked_files(root):
        if rel == SELF or rel.endswith(SKIP_SUFFIXES):
            continue
        path = os.path.join(root, rel)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(lines, 1):
            for rx, why in REGEX:
                m = rx.search(line)
                if m:
                    hits.setdefault(rel, []).append((n, why, m.group(0), line.strip()))
                    break
    return hits


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
    root = os.path.normpath(root)
    failed = 0
    for rel, found in sorted(scan(root).items()):
        allowed = PENDING.get(rel, 0)
        if len(found) <= allowed:
            print(f"pending: {rel}: {len(found)} of {allowed} allowed")
            continue
        for n, why, word, line in found:
            print(f"{rel}:{n}: {why} ('{word}'): {line[:160]}")
            failed += 1
    if failed:
        print(f"\n{failed} line(s) speak of the work rather than the product: reword them (tests/repo/process_words.py)")
        return 1
    print("process words: none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
