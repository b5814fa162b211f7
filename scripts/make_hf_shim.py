#!/usr/bin/python3
"""make_hf_shim.py: builds, outside the repo, the import shim under which transformers 4.27.1's
BridgeTower files run on Debian's python3-torch 1.13 without the rest of transformers (which
cannot be installed on the build machines). scripts/verify_hf_checkpoint.py and the
docs/model-parity.md rerun import the real 4.27.1 modeling code from it.

    /usr/bin/python3 scripts/make_hf_shim.py GIT_DIR [--rev REV] [--out /tmp/hf_bt/shim]
    PYTHONPATH=/tmp/hf_bt/shim /usr/bin/python3 scripts/verify_hf_checkpoint.py --bt-checkpoint ...

GIT_DIR is a git directory holding a transformers 4.27.1 tree, e.g. the fetch tool's mirror of
github:xiaojunjun65/transformers-mlu_4.27.1 (commit 206a0dd0..., docs/model-parity.md). At REV
(default HEAD) its setup.py must say version="4.27.1"; the five files are copied out with
`git show` at run time, keeping their package paths:
    transformers/{activations,pytorch_utils,modeling_outputs}.py
    transformers/models/bridgetower/{modeling,configuration}_bridgetower.py
and their blob ids are printed next to the ones docs/model-parity.md records.

Written by this script (bt's own minimal stand-ins, not transformers code):
  - torch_mlu (empty; the vendor fork imports it) and packaging.version (parse, compare);
  - transformers.utils: logging.get_logger, no-op docstring decorators, ModelOutput (a
    dataclass whose non-None fields are also dict items; out[i] / out[a:b] index them);
  - configuration_utils.PretrainedConfig: the generic attributes the BridgeTower code reads,
    with their 4.27.1 defaults (return_dict, is_decoder, chunk_size_feed_forward, ...); every
    other keyword argument becomes an attribute, as in 4.27.1;
  - modeling_utils.PreTrainedModel with 4.27.1's behaviour for what BridgeTower uses: post_init
    applies _init_weights once per module and ties embeddings only when tie_word_embeddings;
    dtype; get_extended_attention_mask (encoder: (1 - mask) * finfo(dtype).min);
    get_head_mask (None only).
  - models/bridgetower/modeling_bridgetower_bcast.py: the modeling file with one change, the
    `.expand_as(image_embeds_with_ln)` of BridgeTowerForContrastiveLearning.forward dropped
    (broadcast instead), so the ITC forward runs when vision hidden size != hidden size (the
    tiny fixture; docs/model-parity.md). Only used to run that forward, never to load.

Deliberately not here: from_pretrained / save_pretrained (verify_hf_checkpoint.py ports the
4.27.1 key matching), hub access, tokenizers, anything beyond BridgeTower's imports. The output
directory is replaced; it must not be inside the repository.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = {  # path in the transformers tree -> blob id recorded in docs/model-parity.md
    "src/transformers/models/bridgetower/modeling_bridgetower.py": "28fc39ed549c96cc58c3ef9ca6a4a5465bf7212f",
    "src/transformers/models/bridgetower/configuration_bridgetower.py": "3149b34efaac4c2b56bbbd467f19a263ee4f17ec",
    "src/transformers/activations.py": "07633c8a726887680a720b20e7aa227dc4a7405a",
    "src/transformers/pytorch_utils.py": "40c089a6db4cefb33adc73eb51f2603435cff967",
    "src/transformers/modeling_outputs.py": "2515d0526d3bbe0ad32193b6d2e4db2694cd4611",
}

STANDINS = {
    "torch_mlu.py": '"""Empty stand-in: the vendor fork of transformers 4.27.1 imports torch_mlu."""\n',
    "packaging/__init__.py": "",
    "packaging/version.py": '''"""Stand-in for packaging.version: parse() of dotted release numbers (a local or pre-release
suffix is ignored), comparable, with base_version. Enough for transformers' torch-version tests."""
import re


class Version:
    def __init__(self, text):
        m = re.match(r"\\s*v?(\\d+(?:\\.\\d+)*)", str(text))
        if not m:
            raise ValueError("invalid version %r" % (text,))
        self.release = tuple(int(x) for x in m.group(1).split("."))
        self.base_version = ".".join(str(x) for x in self.release)

    def _key(self):
        r = list(self.release)
        while r and r[-1] == 0:
            r.pop()
        return tuple(r)

    def __lt__(self, o):
        return self._key() < o._key()

    def __le__(self, o):
        return self._key() <= o._key()

    def __gt__(self, o):
        return self._key() > o._key()

    def __ge__(self, o):
        return self._key() >= o._key()

    def __eq__(self, o):
        return self._key() == o._key()


def parse(text):
    return Version(text)
''',
    "transformers/__init__.py": "",
    "transformers/models/__init__.py": "",
    "transformers/models/bridgetower/__init__.py": "",
    "transformers/utils/logging.py": '''"""Stand-in for transformers.utils.logging: the standard library's loggers."""
import logging


def get_logger(name=None):
    return logging.getLogger(name)
''',
    "transformers/utils/__init__.py": '''"""Stand-in for transformers.utils: logging, no-op docstring decorators, ModelOutput."""
from collections import OrderedDict
from dataclasses import fields

from . import logging  # noqa: F401


def add_start_docstrings(*_args, **_kwargs):
    return lambda fn: fn


add_start_docstrings_to_model_forward = add_start_docstrings
replace_return_docstrings = add_start_docstrings


class ModelOutput(OrderedDict):
    """Base of the output dataclasses: the fields that are not None are also dict items, in field
    order; an int or a slice indexes the tuple of those values, a string the items."""

    def __post_init__(self):
        for f in fields(self):
            if getattr(self, f.name) is not None:
                OrderedDict.__setitem__(self, f.name, getattr(self, f.name))

    def __getitem__(self, k):
        return OrderedDict.__getitem__(self, k) if isinstance(k, str) else self.to_tuple()[k]

    def to_tuple(self):
        return tuple(self.values())
''',
    "transformers/configuration_utils.py": '''"""Stand-in for transformers 4.27.1 PretrainedConfig: the generic attributes the BridgeTower code
reads, with 4.27.1's defaults; every other keyword argument becomes an attribute. No file I/O."""
import copy

import torch

GENERIC_DEFAULTS = {
    "return_dict": True, "output_hidden_states": False, "output_attentions": False, "torchscript": False,
    "torch_dtype": None, "pruned_heads": {}, "tie_word_embeddings": True, "is_encoder_decoder": False,
    "is_decoder": False, "add_cross_attention": False, "tie_encoder_decoder": False,
    "chunk_size_feed_forward": 0, "architectures": None, "bos_token_id": None, "pad_token_id": None,
    "eos_token_id": None, "transformers_version": None,
}


class PretrainedConfig:
    model_type = ""

    def __init__(self, **kwargs):
        for key, default in GENERIC_DEFAULTS.items():
            setattr(self, key, kwargs.pop(key, copy.deepcopy(default)))
        if isinstance(self.torch_dtype, str):
            self.torch_dtype = getattr(torch, self.torch_dtype)
        for key, value in kwargs.items():
            setattr(self, key, value)

    @property
    def use_return_dict(self):
        return self.return_dict and not self.torchscript

    def to_dict(self):
        out = copy.deepcopy(self.__dict__)
        out["model_type"] = self.__class__.model_type
        return out
''',
    "transformers/modeling_utils.py": '''"""Stand-in for transformers 4.27.1 PreTrainedModel, for what BridgeTower uses (see
scripts/make_hf_shim.py). apply_chunking_to_forward is re-exported from the real pytorch_utils."""
import torch
from torch import nn

from .pytorch_utils import apply_chunking_to_forward  # noqa: F401


class PreTrainedModel(nn.Module):
    config_class = None
    base_model_prefix = ""
    _keys_to_ignore_on_load_missing = None
    _keys_to_ignore_on_load_unexpected = None
    supports_gradient_checkpointing = False

    def __init__(self, config, *args, **kwargs):
        super().__init__()
        self.config = config

    @property
    def dtype(self):
        return next((p.dtype for p in self.parameters() if p.is_floating_point()), torch.float32)

    def post_init(self):
        if self.config.pruned_heads:
            raise NotImplementedError("shim: pruned_heads")
        for module in self.modules():  # each module once, also when a sub-model already ran post_init
            if not getattr(module, "_is_hf_initialized", False):
                self._init_weights(module)
                module._is_hf_initialized = True
        if self.config.tie_word_embeddings and self.get_output_embeddings() is not None:
            self.get_output_embeddings().weight = self.get_input_embeddings().weight

    def get_output_embeddings(self):
        return None

    def get_input_embeddings(self):
        return getattr(self, self.base_model_prefix).get_input_embeddings()

    def get_extended_attention_mask(self, attention_mask, input_shape, device=None, dtype=None):
        dtype = dtype or self.dtype
        if self.config.is_decoder or attention_mask.dim() != 2:
            raise NotImplementedError("shim: only the encoder's (B, T) padding mask")
        keep = attention_mask[:, None, None, :].to(dtype)
        return (1.0 - keep) * torch.finfo(dtype).min

    def get_head_mask(self, head_mask, num_hidden_layers, is_attention_chunked=False):
        if head_mask is not None:
            raise NotImplementedError("shim: head_mask")
        return [None] * num_hidden_layers
''',
}


def git(git_dir, *args):
    """stdout of `git -C git_dir args` (a bare directory, as the fetch tool gives, or a checkout)."""
    return subprocess.run(["git", "-C", git_dir] + list(args), check=True, capture_output=True).stdout


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("git_dir", help="git directory of a transformers 4.27.1 tree")
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--out", default="/tmp/hf_bt/shim")
    a = ap.parse_args(argv)
    out = os.path.abspath(a.out)
    if out == REPO or out.startswith(REPO + os.sep):
        sys.exit("make_hf_shim.py: %s is inside the repository; transformers code must stay outside it" % out)
    try:
        setup = git(a.git_dir, "show", "%s:setup.py" % a.rev).decode()
    except subprocess.CalledProcessError as e:
        sys.exit("make_hf_shim.py: %s: cannot read setup.py at %s (git: %s)"
                 % (a.git_dir, a.rev, e.stderr.decode(errors="replace").strip()))
    if not re.search(r'version="4\.27\.1"', setup):
        sys.exit('make_hf_shim.py: %s at %s: setup.py does not say version="4.27.1"' % (a.git_dir, a.rev))
    shutil.rmtree(out, ignore_errors=True)
    for path, want in FILES.items():
        blob = git(a.git_dir, "rev-parse", "%s:%s" % (a.rev, path)).decode().strip()
        dest = os.path.join(out, path[len("src/"):])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as f:
            f.write(git(a.git_dir, "show", blob))
        print("%s  %s  %s" % (blob, path, "(as docs/model-parity.md)" if blob == want else "(docs record %s)" % want))
    for path, text in STANDINS.items():
        dest = os.path.join(out, path)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "w") as f:
            f.write(text)
    src = os.path.join(out, "transformers", "models", "bridgetower", "modeling_bridgetower.py")
    with open(src) as f:
        text = f.read()
    itc = text.index("class BridgeTowerForContrastiveLearning")
    cut = ".expand_as(image_embeds_with_ln)"
    if text.count(cut, itc) != 1:
        sys.exit("make_hf_shim.py: %s: expected one '%s' in BridgeTowerForContrastiveLearning" % (src, cut))
    with open(src.replace(".py", "_bcast.py"), "w") as f:
        f.write(text[:itc] + text[itc:].replace(cut, ""))
    print("shim written to %s (PYTHONPATH=%s)" % (out, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
