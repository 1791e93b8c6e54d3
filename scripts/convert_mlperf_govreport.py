#!/usr/bin/env python3
"""Converts the MLPerf Training Llama 2 70B LoRA dataset into trainbench's packed data (src/train/packed_data.h):
OUT.bin (the documents' tokens back to back) and OUT.index (the documents and their loss spans), for
`trainbench train --data OUT.index`.

The MLPerf dataset is GovReport tokenised for Llama 2, one sample per row of its parquet files
(train-00000-of-00001.parquet, validation-00000-of-00001.parquet), each a report followed by its summary, cut to
8,192 tokens:
  input_ids       the sample's token ids (padded at the end when shorter than the row)
  labels          -100 where the loss does not count (the report, the padding), the token id where it does (the
                  summary); NVIDIA's MLPerf submission reads its loss mask as labels != -100
  attention_mask  1 on the sample's tokens, 0 on the padding (optional: without it the whole row is the sample)
Each row becomes one document: its tokens where the attention mask is 1 (a prefix of the row); the target of position
i is token i + 1, and it counts where labels[i + 1] != -100; runs of counted positions are the loss spans.

usage: convert_mlperf_govreport.py PARQUET [PARQUET...] --out OUT [--token-type auto|uint16|uint32]
Needs pyarrow (scripts/setup.sh installs it into .deps/pytools: PYTHONPATH=.deps/pytools).
"""
import argparse
import struct
import sys
from array import array

import pyarrow.compute as pc
import pyarrow.parquet as pq

MAGIC = b"TBPACK01"
COLUMNS = ("input_ids", "labels")


def fail(msg):
    sys.exit(f"convert_mlperf_govreport: {msg}")


def batches(paths):
    """(path, row, input_ids, labels, attention_mask or None) for every row of the files."""
    for path in paths:
        f = pq.ParquetFile(path)
        names = set(f.schema_arrow.names)
        if not set(COLUMNS) <= names:
            fail(f"{path}: needs the columns {', '.join(COLUMNS)} (it has {', '.join(sorted(names))})")
        cols = list(COLUMNS) + (["attention_mask"] if "attention_mask" in names else [])
        row = 0
        for b in f.iter_batches(batch_size=64, columns=cols):
            ids, labels = b.column("input_ids").to_pylist(), b.column("labels").to_pylist()
            masks = b.column("attention_mask").to_pylist() if "attention_mask" in cols else [None] * len(ids)
            for i, l, m in zip(ids, labels, masks):
                yield path, row, i, l, m
                row += 1


def largest_id(paths):
    top = 0
    for path in paths:
        ids = pq.read_table(path, columns=["input_ids"]).column("input_ids")
        m = pc.max(pc.list_flatten(ids)).as_py()
        top = max(top, m if m is not None else 0)
    return top


def document(path, row, ids, labels, mask):
    """The row's tokens and its loss spans [(begin, end), ...] over target positions."""
    where = f"{path} row {row}"
    if len(labels) != len(ids) or (mask is not None and len(mask) != len(ids)):
        fail(f"{where}: input_ids, labels and attention_mask have different lengths")
    n = len(ids) if mask is None else sum(1 for m in mask if m)
    if mask is not None and any(mask[n:]) or n < 1:
        fail(f"{where}: the attention mask is not one run of 1s at the start of the row")
    if any(t < 0 for t in ids[:n]):
        fail(f"{where}: a negative token id")
    spans, begin = [], None
    for i in range(n - 1):
        counted = labels[i + 1] != -100
        if counted and begin is None:
            begin = i
        if not counted and begin is not None:
            spans.append((begin, i))
            begin = None
    if begin is not None:
        spans.append((begin, n - 1))
    return ids[:n], spans


def convert(paths, out, token_type):
    if token_type == "auto":
        token_type = "uint16" if largest_id(paths) < 1 << 16 else "uint32"
    code, size = ("H", 2) if token_type == "uint16" else ("I", 4)
    docs, spans = array("Q"), array("I")  # per document: first token, tokens, first span; per span: begin, end
    at = 0
    with open(out + ".bin", "wb") as bin_file:
        for path, row, ids, labels, mask in batches(paths):
            tokens, doc_spans = document(path, row, ids, labels, mask)
            if max(tokens) >= 1 << (8 * size):
                fail(f"{path} row {row}: token id {max(tokens)} does not fit {token_type}")
            array(code, tokens).tofile(bin_file)
            docs.extend([at, len(tokens) | (len(spans) // 2) << 32])
            for b, e in doc_spans:
                spans.extend([b, e])
            at += len(tokens)
    if not docs:
        fail("no rows in " + ", ".join(paths))
    with open(out + ".index", "wb") as f:
        f.write(MAGIC + struct.pack("<IIQQ", size, 0, len(docs) // 2, len(spans) // 2))
        if sys.byteorder != "little":
            docs.byteswap(), spans.byteswap()
        docs.tofile(f)
        spans.tofile(f)
    print(f"{out}.index: {len(docs) // 2} documents, {at} {token_type} tokens, {len(spans) // 2} loss spans")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("parquet", nargs="+", help="the MLPerf parquet files")
    p.add_argument("--out", required=True, help="writes OUT.bin and OUT.index")
    p.add_argument("--token-type", choices=["auto", "uint16", "uint32"], default="auto")
    a = p.parse_args()
    convert(a.parquet, a.out, a.token_type)


if __name__ == "__main__":
    main()
