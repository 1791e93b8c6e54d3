#!/usr/bin/env python3
"""make_text_tokens.py: a real-text token stream for accuracy runs, from English text already on a Debian/Ubuntu
machine (licences and package copyright files under /usr/share): the bytes of the text as uint16 tokens (a byte-level
vocabulary of 256, so any model with vocab >= 256 can read it; the `small` preset has 512), concatenated file by
file in sorted order with a newline between files, capped at --max-bytes. Deterministic for a given machine.
Usage: bench/make_text_tokens.py OUT.u16 [--max-bytes 8000000]"""
import argparse
import array
import glob
import os

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("out")
ap.add_argument("--max-bytes", type=int, default=8_000_000)
args = ap.parse_args()
files = sorted(glob.glob("/usr/share/common-licenses/*")) + sorted(glob.glob("/usr/share/doc/*/copyright"))
data = bytearray()
for f in files:
    if not os.path.isfile(f):
        continue
    with open(f, "rb") as fh:
        data += fh.read() + b"\n"
    if len(data) >= args.max_bytes:
        break
data = data[: args.max_bytes]
array.array("H", list(data)).tofile(open(args.out, "wb"))  # one uint16 token per byte
print(f"{args.out}: {len(data)} tokens (bytes) from {len(files)} files")
