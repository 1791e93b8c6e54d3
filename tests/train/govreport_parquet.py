#!/usr/bin/env python3
"""Writes a tiny parquet file in the shape of the MLPerf Llama 2 70B LoRA dataset (tests/train/packed_data_test.cpp
converts it with scripts/convert_mlperf_govreport.py and reads the result).

    govreport_parquet.py FILE

Rows of 16 tokens; row r holds a sample of n_r = 6 + 2 r tokens (r < 5): token i of row r is 100 r + i + 1, the first
p_r = 3 + r are the report (labels -100), the rest the summary (labels = the token); the padding is token 0 with
labels -100 and attention_mask 0. Row 5 has no attention mask padding (16 tokens) and two summary runs: tokens 8..11
and 13..15.
"""
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def main(path):
    ids, labels, masks = [], [], []
    for r in range(5):
        n, p = 6 + 2 * r, 3 + r
        row = [100 * r + i + 1 for i in range(n)] + [0] * (16 - n)
        ids.append(row)
        labels.append([-100] * p + row[p:n] + [-100] * (16 - n))
        masks.append([1] * n + [0] * (16 - n))
    row = [500 + i + 1 for i in range(16)]
    ids.append(row)
    labels.append([t if 8 <= i < 12 or i >= 13 else -100 for i, t in enumerate(row)])
    masks.append([1] * 16)
    pq.write_table(pa.table({"input_ids": ids, "attention_mask": masks, "labels": labels}), path)


if __name__ == "__main__":
    main(sys.argv[1])
