#!/usr/bin/python3
"""gen_safetensors_fixtures.py: writes tests/fixtures/safetensors/reference.safetensors, a
small file produced by a writer independent of bt (plain struct + json here, values and
dtype conversions by PyTorch), read back by tests/test_safetensors.c.

What it holds and why:
- every dtype bt reads (F32, BF16, F16, I64, I32, I16, I8, U8, BOOL), a 0-d scalar and a
  zero-size tensor, plus "__metadata__";
- for each 16-bit float tensor x, the fp32 values PyTorch itself decodes them to
  (x_f16_as_f32 = x_f16.float(), ...), so bt's decoders are checked against PyTorch, not
  against themselves; x_bf16_src is the fp32 source of x_bf16 (torch's round-to-nearest-
  even), so bt's fp32 -> bf16 writer conversion is checked against PyTorch too;
- an I8 tensor first, so every later tensor's data is unaligned (bt must memcpy);
- big_i64 holds a value outside int32 (bt's read_i32 must refuse it).
The header is compact JSON padded with spaces to a multiple of 8 bytes, as the reference
implementation writes it. Deliberately not used: the safetensors Python package.

Run: /usr/bin/python3 scripts/gen_safetensors_fixtures.py   (seed fixed below)
"""
import json
import os
import struct

import torch

SEED = 20240601
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                   "safetensors", "reference.safetensors")

DTYPE_NAMES = {
    torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}


def raw_bytes(t):
    t = t.contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().tobytes()  # numpy has no bf16; same bits
    return t.numpy().tobytes()


def main():
    torch.manual_seed(SEED)
    inf, nan = float("inf"), float("nan")

    x_f32 = torch.tensor([[0.5, -1.25, 1024.0], [-0.0, 2.0**-149, 3.4028234663852886e38]],
                         dtype=torch.float32)

    f16_src = [1.0, -2.0, 65504.0, 2.0**-24, -3 * 2.0**-24, 1e-5, 0.1, -inf, inf, nan,
               -0.0, 6.1e-5]
    x_f16 = torch.tensor(f16_src, dtype=torch.float32).half()

    bf16_src = torch.cat([
        torch.tensor([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -3.14159265, 1e-40,
                      3.4028234663852886e38, -inf, nan, 0.1, 65504.0, -0.0, 1.0 - 2.0**-9],
                     dtype=torch.float32),
        torch.randn(20, dtype=torch.float32) * 10.0,
    ])
    x_bf16 = bf16_src.bfloat16()

    tensors = [
        ("i8_first", torch.tensor([-128, 0, 127], dtype=torch.int8)),
        ("x_f32", x_f32),
        ("x_f16", x_f16),
        ("x_f16_as_f32", x_f16.float()),
        ("x_bf16", x_bf16),
        ("x_bf16_as_f32", x_bf16.float()),
        ("x_bf16_src", bf16_src),
        ("ids_i64", torch.tensor([[0, -1, 2147483647], [-2147483648, 42, 50264]],
                                 dtype=torch.int64)),
        ("big_i64", torch.tensor([2147483648, -5], dtype=torch.int64)),
        ("i32", torch.tensor([7, -7, 100000], dtype=torch.int32)),
        ("i16", torch.tensor([-32768, 32767], dtype=torch.int16)),
        ("u8", torch.tensor([0, 200, 255], dtype=torch.uint8)),
        ("mask", torch.tensor([True, False, True, True])),
        ("scalar", torch.tensor(7.25, dtype=torch.float32)),
        ("empty", torch.zeros((0, 3), dtype=torch.float16)),
    ]

    header = {"__metadata__": {"format": "pt", "source": "gen_safetensors_fixtures.py"}}
    data = bytearray()
    for name, t in tensors:
        b = raw_bytes(t)
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(data)
    print(f"wrote {os.path.normpath(OUT)}: {8 + len(text) + len(data)} bytes, "
          f"{len(tensors)} tensors")


if __name__ == "__main__":
    main()
