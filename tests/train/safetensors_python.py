#!/usr/bin/env python3
"""The Python safetensors package against trainbench's safetensors files (tests/train/safetensors_test.cpp runs it).

    safetensors_python.py check FILE   reads FILE with safetensors.deserialize and checks the reference tensors
    safetensors_python.py write FILE   writes the reference tensors with safetensors.serialize_file

The reference tensors (the C++ test builds the same): "lora_a" F32 [3, 5], element i = 0.25 i - 1.5; "lora_b" BF16
[4, 2], element i = 0.5 i - 2 (exact in bf16); "scale" F32 [] = 2; "empty" F32 [0, 3]; metadata {"format": "pt",
"step": "7"}. Exit 0 when they match, 1 otherwise (with the difference printed).
"""
import ctypes
import struct
import sys

from safetensors import TensorSpec, deserialize, serialize_file


def bf16_bytes(values):
    out = bytearray()
    for v in values:  # exact in bf16: the upper 16 bits of the float32
        out += struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:]
    return bytes(out)


def reference():
    return {
        "lora_a": ("F32", [3, 5], struct.pack("<15f", *[0.25 * i - 1.5 for i in range(15)])),
        "lora_b": ("BF16", [4, 2], bf16_bytes([0.5 * i - 2 for i in range(8)])),
        "scale": ("F32", [], struct.pack("<f", 2.0)),
        "empty": ("F32", [0, 3], b""),
    }


METADATA = {"format": "pt", "step": "7"}


def check(path):
    with open(path, "rb") as f:
        raw = f.read()
    got = {name: (t["dtype"], list(t["shape"]), bytes(t["data"])) for name, t in deserialize(raw)}
    want = reference()
    if got != want:
        print(f"tensors differ:\n  got  {got}\n  want {want}")
        return 1
    header_len = struct.unpack("<Q", raw[:8])[0]
    if (8 + header_len) % 8 != 0:
        print(f"the data starts at byte {8 + header_len}, not 8-byte aligned")
        return 1
    import json

    meta = json.loads(raw[8 : 8 + header_len]).get("__metadata__")
    if meta != METADATA:
        print(f"metadata {meta}, want {METADATA}")
        return 1
    print(f"ok: {sorted(got)}")
    return 0


def write(path):
    keep = []  # the buffers must outlive serialize_file
    specs = {}
    for name, (dtype, shape, data) in reversed(list(reference().items())):
        buf = ctypes.create_string_buffer(data, max(len(data), 1))
        keep.append(buf)
        specs[name] = TensorSpec(dtype={"F32": "float32", "BF16": "bfloat16"}[dtype], shape=shape,
                                 data_ptr=ctypes.addressof(buf), data_len=len(data))
    serialize_file(specs, path, metadata=METADATA)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("check", "write"):
        sys.exit(__doc__)
    sys.exit(check(sys.argv[2]) if sys.argv[1] == "check" else write(sys.argv[2]))
