#!/usr/bin/python3
"""convert_checkpoint.py: turn a Hugging Face model directory whose weights are pickles
(pytorch_model.bin, or shards listed in pytorch_model.bin.index.json) or safetensors shards
(model.safetensors.index.json) into the single model.safetensors that bt reads.

    /usr/bin/python3 scripts/convert_checkpoint.py MODEL_DIR [--out OUT_DIR] [--dtype keep|fp32|bf16] [--force]

Every tensor is kept under its state-dict name (the int64 position_ids / token_type_ids
buffers too: bt skips them, transformers expects them in 4.27); floating tensors keep their
dtype (--dtype keep, default) or are cast; float64 becomes float32; integer tensors become
int64. Tensors that share storage (tied weights) are written as separate copies, as the
safetensors format requires. The file gets "__metadata__" {"format": "pt"}, as
save_pretrained writes it. With --out, config.json and the tokenizer / preprocessor files are
copied next to it. An existing model.safetensors is not overwritten without --force.

Needs torch (Debian's python3-torch) and scripts/safetensors_io.py; not the safetensors or
transformers packages. Run once per downloaded checkpoint; the C engine never needs Python.

Deliberately not here: key renaming (bt accepts HF's names with or without the
`bridgetower.` prefix), pruning heads (bt ignores and reports keys of heads it does not build).
"""

import argparse
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

AUX_FILES = ["config.json", "vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
             "special_tokens_map.json", "preprocessor_config.json"]


def torch_load(path):
    try:  # weights_only (torch >= 1.13) refuses arbitrary pickled code
        return torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:
        return torch.load(path, map_location="cpu")


def read_state(model_dir):
    """Returns (ordered dict name -> tensor, description of the source)."""
    def shards(index_name):
        with open(os.path.join(model_dir, index_name)) as f:
            index = json.load(f)
        files = []
        for fn in index["weight_map"].values():
            if fn not in files:
                files.append(fn)
        return files

    bin_path = os.path.join(model_dir, "pytorch_model.bin")
    if os.path.exists(bin_path):
        return torch_load(bin_path), "pytorch_model.bin"
    if os.path.exists(os.path.join(model_dir, "pytorch_model.bin.index.json")):
        state = {}
        files = shards("pytorch_model.bin.index.json")
        for fn in files:
            state.update(torch_load(os.path.join(model_dir, fn)))
        return state, "%d pytorch_model shards" % len(files)
    if os.path.exists(os.path.join(model_dir, "model.safetensors.index.json")):
        state = {}
        files = shards("model.safetensors.index.json")
        for fn in files:
            state.update(safetensors_io.load_file(os.path.join(model_dir, fn)))
        return state, "%d model.safetensors shards" % len(files)
    raise SystemExit("%s: no pytorch_model.bin, pytorch_model.bin.index.json or "
                     "model.safetensors.index.json to convert" % model_dir)


def convert_tensor(name, t, dtype):
    if not isinstance(t, torch.Tensor):
        raise SystemExit("entry %s is not a tensor (%s)" % (name, type(t).__name__))
    t = t.detach().to("cpu")
    if t.is_floating_point():
        if t.dtype == torch.float64:
            t = t.float()
        if dtype == "fp32":
            t = t.float()
        elif dtype == "bf16":
            t = t.to(torch.bfloat16)
    elif not t.is_complex():  # integer and bool buffers
        t = t.to(torch.int64)
    else:
        raise SystemExit("tensor %s: unsupported dtype %s" % (name, t.dtype))
    return t.contiguous().clone()  # clone: untie shared storages


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--out", help="output model directory (default: MODEL_DIR)")
    ap.add_argument("--dtype", choices=["keep", "fp32", "bf16"], default="keep")
    ap.add_argument("--force", action="store_true", help="overwrite an existing model.safetensors")
    a = ap.parse_args(argv)
    out = a.out or a.model_dir
    dst = os.path.join(out, "model.safetensors")
    if os.path.exists(dst) and not a.force:
        raise SystemExit("%s exists; pass --force to overwrite it" % dst)
    state, source = read_state(a.model_dir)
    tensors = {k: convert_tensor(k, v, a.dtype) for k, v in state.items()}
    os.makedirs(out, exist_ok=True)
    if os.path.abspath(out) != os.path.abspath(a.model_dir):
        for fn in AUX_FILES:
            src = os.path.join(a.model_dir, fn)
            if os.path.exists(src):
                shutil.copyfile(src, os.path.join(out, fn))
    safetensors_io.save_file(tensors, dst, metadata={"format": "pt"})
    n = sum(t.numel() for t in tensors.values())
    print("%s: %d tensors (%d elements) from %s" % (dst, len(tensors), n, source))


if __name__ == "__main__":
    main(sys.argv[1:])
