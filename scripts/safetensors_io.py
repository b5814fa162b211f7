"""safetensors_io.py: minimal reader and writer of the safetensors format, in plain Python + torch.

Format (https://github.com/huggingface/safetensors, described here from the format's documentation):
  8 bytes   little-endian u64 N = length of the JSON header
  N bytes   UTF-8 JSON object {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
            "__metadata__": {"key": "value", ...}}; padded with spaces so that the data section
            starts at an 8-byte aligned file offset
  data      raw little-endian tensor bytes, C order; offsets are relative to the start of data

Supported dtypes: F32, F16, BF16, I64 (what the BridgeTower fixtures and checkpoints use).
The header lists tensors in the order given; the data section holds them back to back, widest
element type first, so every tensor is naturally aligned (the data section itself is 8-aligned).

Deliberately not here: memory mapping, lazy loading, the other dtypes (I32, U8, BOOL, F64, ...),
and the `safetensors` package (not installed on the target machines; this file must not need it).
"""

import json
import os
import struct

import torch

_DTYPES = {
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8),
}
_TORCH_TO_NAME = {v[0]: k for k, v in _DTYPES.items()}

# Same-width integer views used to move raw bytes in and out of torch without numpy dtype issues
# (numpy has no bfloat16).
_INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
             torch.int64: torch.int64}


def _tensor_bytes(t):
    t = t.detach().to("cpu").contiguous()
    if t.dtype not in _INT_VIEW:
        raise ValueError("unsupported dtype %s" % t.dtype)
    return t.reshape(-1).view(_INT_VIEW[t.dtype]).numpy().tobytes()


def save_file(tensors, path, metadata=None):
    """Writes an ordered mapping name -> torch.Tensor (F32/F16/BF16/I64) to `path`.

    metadata: optional dict of str -> str stored as "__metadata__". The write goes to a temp file
    that is renamed over `path`, so a crash never leaves a half-written file under the final name."""
    for name, t in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError("bad tensor name %r" % (name,))
        if t.dtype not in _TORCH_TO_NAME:
            raise ValueError("tensor %s: unsupported dtype %s" % (name, t.dtype))
    # Data layout: widest element type first (stable within a width), so every tensor starts at
    # a multiple of its element size (the format forbids holes, so padding is not an option).
    # The header keeps the caller's order.
    layout = sorted(tensors.keys(), key=lambda k: -_DTYPES[_TORCH_TO_NAME[tensors[k].dtype]][1])
    blobs = []
    offsets = {}
    offset = 0
    for name in layout:
        b = _tensor_bytes(tensors[name])
        offsets[name] = [offset, offset + len(b)]
        blobs.append(b)
        offset += len(b)
    header = {}
    for name, t in tensors.items():
        header[name] = {"dtype": _TORCH_TO_NAME[t.dtype], "shape": list(t.shape),
                        "data_offsets": offsets[name]}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ValueError("metadata must map str to str (key %r)" % (k,))
        header = {"__metadata__": dict(metadata), **header}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-(8 + len(hjson))) % 8)   # data section starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_file(path, with_metadata=False):
    """Reads `path` and returns an ordered dict name -> torch.Tensor (header order), plus the
    metadata dict if with_metadata. Validates lengths and offsets; raises ValueError naming the
    file and tensor on any inconsistency."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: file shorter than the 8-byte header length" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("%s: header length %d beyond file size %d" % (path, n, len(raw)))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", None) or {}
    out = {}
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, info["dtype"]))
        dt, size = _DTYPES[info["dtype"]]
        shape = info["shape"]
        b, e = info["data_offsets"]
        numel = 1
        for s in shape:
            numel *= s
        if e - b != numel * size or b < 0 or e > len(data):
            raise ValueError("%s: tensor %s: offsets [%d, %d) disagree with shape %s / data size %d"
                             % (path, name, b, e, shape, len(data)))
        buf = bytearray(data[b:e])
        if numel == 0:
            t = torch.zeros(shape, dtype=dt)
        else:
            t = torch.frombuffer(buf, dtype=_INT_VIEW[dt]).view(dt).reshape(shape).clone()
        out[name] = t
    return (out, meta) if with_metadata else out
