#!/usr/bin/python3
"""verify_hf_checkpoint.py: checkpoints written by bt open in Hugging Face transformers'
BridgeTower classes, and checkpoints written the way transformers writes them open in bt.

    PYTHONPATH=/tmp/hf_bt/shim /usr/bin/python3 scripts/verify_hf_checkpoint.py \
        --bt-checkpoint build-ckpt/src/model/bt-checkpoint [--work /tmp/bt_hf_check]

Needs a transformers 4.27.1 BridgeTower (modeling_bridgetower.py + configuration_bridgetower.py)
importable as transformers.models.bridgetower; transformers itself is not installable on the
build machines, so docs/checkpoints.md records the run made against the 4.27.1 source files
with a minimal import shim. A one-off compatibility check, not part of the test suite.

A. bt -> HF: bt-checkpoint re-saves tests/fixtures/tiny (all heads; ITM only; backbone only;
   BF16). For each directory: BridgeTowerConfig(**config.json) (what from_pretrained does with
   the dict) gives the fixture's dimensions; for every HF class whose heads are present,
   4.27.1's from_pretrained key matching (base_model_prefix added or removed,
   _keys_to_ignore_on_load_*) finds no missing key and no unexpected key but other heads',
   and the matched tensors (the int64 position_ids buffers included) load with
   load_state_dict(strict=True); F32 directories then reproduce the fixture's outputs
   (tests/fixtures/tiny_io.safetensors) to 1e-5; the BF16 directory holds the RNE-rounded
   fixture weights.
B. HF -> bt: each HF class (BridgeTowerModel, ...ForImageAndTextRetrieval, ...ForMaskedLM,
   ...ForContrastiveLearning), built from the tiny config with HF's own init, has its full
   state_dict (int64 buffers included; bare keys for BridgeTowerModel) written as
   save_pretrained(safe_serialization=True) writes it; bt-checkpoint loads it (heads from the
   file) and re-saves; every HF parameter must come back bit for bit under bt's key.
C. pytorch_model.bin: bt refuses it with the conversion command; scripts/convert_checkpoint.py
   converts; bt then loads the same values.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import safetensors_io as st  # noqa: E402
from transformers.models.bridgetower import modeling_bridgetower as hf  # noqa: E402
from transformers.models.bridgetower.configuration_bridgetower import BridgeTowerConfig  # noqa: E402
try:
    # 4.27.1's ForContrastiveLearning.forward adds the image type embedding with expand_as to the
    # Hv-wide ln_post output, which runs only when Hv == H (true for every published checkpoint,
    # not for the tiny fixture: Hv 64, H 32). The shim's copy differs from 4.27.1 in that one line
    # (broadcast instead of expand_as); it is used only to run the ITC forward, never to load.
    from transformers.models.bridgetower import modeling_bridgetower_bcast as hf_bcast  # noqa: E402
except ImportError:
    hf_bcast = None

FIX = os.path.join(REPO, "tests", "fixtures")
TINY = os.path.join(FIX, "tiny")
CLASSES = {  # head -> HF class (None = the bare backbone)
    None: hf.BridgeTowerModel,
    "itm": hf.BridgeTowerForImageAndTextRetrieval,
    "mlm": hf.BridgeTowerForMaskedLM,
    "itc": hf.BridgeTowerForContrastiveLearning,
}
HEAD_KEYS = {"itm": ("itm_score.",), "mlm": ("mlm_score.",),
             "itc": ("itc_text_head.", "itc_image_head.", "itc_cross_modal_head.", "logit_scale")}
failures = []
log = []


def check(ok, what):
    log.append(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(cmd, expect_rc=0):
    p = subprocess.run(cmd, capture_output=True, text=True)
    check(p.returncode == expect_rc, "%s -> rc %d (want %d) %s" % (" ".join(cmd), p.returncode, expect_rc,
                                                                   p.stderr.strip()[-300:]))
    return p


def heads_in(keys):
    return {h for h, pre in HEAD_KEYS.items() if any(k.startswith(pre) for k in keys)}


def maxdiff(a, b):
    return (a.detach().float() - b.detach().float()).abs().max().item()


def hf427_key_match(cls, model, weights):
    """transformers 4.27.1 _load_pretrained_model's key matching (base_model_prefix added to or
    removed from the model's keys, _keys_to_ignore_on_load_* applied): returns the state dict
    it would load (model key -> file tensor), the missing and the unexpected keys."""
    prefix = cls.base_model_prefix
    expected = list(model.state_dict().keys())
    loaded = list(weights.keys())
    has_prefix = any(k.startswith(prefix) for k in loaded)
    expects_prefix = any(k.startswith(prefix) for k in expected)
    to_file = {k: k for k in expected}
    if not has_prefix and expects_prefix:
        to_file = {k: (k[len(prefix) + 1:] if k.startswith(prefix + ".") else k) for k in expected}
    elif has_prefix and not expects_prefix:
        to_file = {k: prefix + "." + k for k in expected}
    missing = [k for k in expected if to_file[k] not in weights]
    unexpected = sorted(set(loaded) - set(to_file.values()))
    for pat in getattr(cls, "_keys_to_ignore_on_load_missing", None) or []:
        missing = [k for k in missing if re.search(pat, k) is None]
    for pat in getattr(cls, "_keys_to_ignore_on_load_unexpected", None) or []:
        unexpected = [k for k in unexpected if re.search(pat, k) is None]
    sd = {k: weights[f] for k, f in to_file.items() if f in weights}
    return sd, missing, unexpected


def bt_to_hf(tool, work):
    io = st.load_file(os.path.join(FIX, "tiny_io.safetensors"))
    fixture = st.load_file(os.path.join(TINY, "model.safetensors"))
    with open(os.path.join(TINY, "config.json")) as f:
        fix_cfg = json.load(f)
    cases = [("bt_all", []), ("bt_itm", ["--heads", "itm"]), ("bt_none", ["--heads", "none"]),
             ("bt_bf16", ["--dtype", "bf16"])]
    for name, extra in cases:
        out = os.path.join(work, name)
        run([tool, "--model", TINY, "--save", out] + extra)
        with open(os.path.join(out, "config.json")) as f:
            cfg_dict = json.load(f)
        cfg = BridgeTowerConfig(**cfg_dict)
        same = (cfg.hidden_size == fix_cfg["hidden_size"] and cfg.num_hidden_layers == fix_cfg["num_hidden_layers"]
                and cfg.text_config.vocab_size == fix_cfg["text_config"]["vocab_size"]
                and cfg.text_config.num_hidden_layers == fix_cfg["text_config"]["num_hidden_layers"]
                and cfg.vision_config.image_size == fix_cfg["vision_config"]["image_size"]
                and cfg.vision_config.patch_size == fix_cfg["vision_config"]["patch_size"]
                and cfg.contrastive_hidden_size == fix_cfg["contrastive_hidden_size"]
                and cfg.link_tower_type == "add" and cfg_dict["model_type"] == "bridgetower")
        check(same, "%s: BridgeTowerConfig(**config.json) has the fixture's dimensions" % name)
        weights, meta = st.load_file(os.path.join(out, "model.safetensors"), with_metadata=True)
        check(meta.get("format") == "pt", "%s: __metadata__ format = pt (%s)" % (name, meta))
        present = heads_in(weights)
        arch = {"itc": "BridgeTowerForContrastiveLearning", "itm": "BridgeTowerForImageAndTextRetrieval",
                "mlm": "BridgeTowerForMaskedLM"}
        want_arch = [arch[h] for h in ("itc", "itm", "mlm") if h in present] or ["BridgeTowerModel"]
        check(cfg_dict["architectures"] == want_arch, "%s: architectures %s" % (name, cfg_dict["architectures"]))
        check(cfg_dict["torch_dtype"] == ("bfloat16" if "bf16" in name else "float32"),
              "%s: torch_dtype %s" % (name, cfg_dict["torch_dtype"]))
        for head, cls in CLASSES.items():
            if head is not None and head not in present:
                continue
            torch.manual_seed(0)
            model = cls(cfg).eval()
            params = dict(model.named_parameters())
            sd, missing, unexpected = hf427_key_match(cls, model, weights)
            check(not missing, "%s/%s: from_pretrained (4.27.1 key logic) misses nothing (%s)"
                  % (name, cls.__name__, missing[:3]))
            foreign = [k for k in unexpected if not any(k.startswith(p) for hk in HEAD_KEYS.values() for p in hk)]
            check(not foreign, "%s/%s: unexpected keys are other heads' only (%d; foreign %s)"
                  % (name, cls.__name__, len(unexpected), foreign[:3]))
            try:
                model.load_state_dict({k: (v.float() if v.is_floating_point() else v) for k, v in sd.items()},
                                      strict=True)
                check(True, "%s/%s: load_state_dict(strict=True) of the file's tensors (%d parameters, "
                      "buffers included)" % (name, cls.__name__, len(params)))
            except RuntimeError as e:
                check(False, "%s/%s: load_state_dict(strict=True): %s" % (name, cls.__name__, str(e)[:300]))
                continue
            if "bf16" in name:
                fk = lambda k: k if head is not None else "bridgetower." + k  # noqa: E731
                d = max(maxdiff(params[k], fixture[fk(k)].to(torch.bfloat16).float()) for k in params)
                check(d == 0.0, "%s/%s: weights = bf16(fixture) exactly (max diff %g)" % (name, cls.__name__, d))
                continue
            kw = dict(input_ids=io["input_ids"], attention_mask=io["attention_mask"],
                      pixel_values=io["pixel_values"], return_dict=True)
            with torch.no_grad():
                if head is None:
                    o = model(**kw)
                    d = max(maxdiff(o.pooler_output, io["pooler_output"]),
                            maxdiff(o.text_features, io["text_features"]),
                            maxdiff(o.image_features, io["image_features"]))
                elif head == "itm":
                    o = model(labels=io["itm_labels"], **kw)
                    d = max(maxdiff(o.logits, io["itm_logits"]), maxdiff(o.loss, io["loss_itm"]))
                elif head == "mlm":
                    o = model(labels=io["mlm_labels"], **kw)
                    d = max(maxdiff(o.logits, io["mlm_logits"]), maxdiff(o.loss, io["loss_mlm"]))
                else:
                    if hf_bcast is None:
                        log.append("skip %s/%s forward: the tiny fixture has Hv != H, which 4.27.1's ITC "
                                   "forward cannot run (loading was checked)" % (name, cls.__name__))
                        continue
                    runner = hf_bcast.BridgeTowerForContrastiveLearning(cfg).eval()
                    runner.load_state_dict(sd, strict=True)
                    o = runner(labels=io["itm_labels"], **kw)
                    d = max(maxdiff(o.logits, io["itc_logits"]), maxdiff(o.loss, io["loss_itc"]))
            check(d <= 1e-5, "%s/%s: HF forward reproduces the fixture outputs (max diff %.3g)"
                  % (name, cls.__name__, d))


def write_hf_dir(out, model, cfg_dict, arch):
    """What save_pretrained(safe_serialization=True) writes in 4.27: the full state_dict
    (buffers included), metadata format pt, config.json with architectures and version."""
    os.makedirs(out, exist_ok=True)
    st.save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()},
                 os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    d = dict(cfg_dict)
    d["architectures"] = [arch]
    d["transformers_version"] = "4.27.1"
    d["torch_dtype"] = "float32"
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)


def hf_to_bt(tool, work):
    with open(os.path.join(TINY, "config.json")) as f:
        cfg_dict = json.load(f)
    for i, (head, cls) in enumerate(CLASSES.items()):
        torch.manual_seed(100 + i)
        model = cls(BridgeTowerConfig(**cfg_dict))
        name = "hf_" + cls.__name__
        src = os.path.join(work, name)
        write_hf_dir(src, model, cfg_dict, cls.__name__)
        n_buf = sum(1 for k in model.state_dict() if k.endswith(("position_ids", "token_type_ids")))
        out = src + "_bt"
        p = run([tool, "--model", src, "--save", out])
        check("%d legacy buffers skipped" % n_buf in p.stdout,
              "%s: bt skipped the %d int64 buffers (%s)" % (name, n_buf, p.stdout.strip().splitlines()[-2:]))
        check("unexpected" not in p.stderr and "notice" not in p.stderr,
              "%s: no unexpected keys, no initialized heads (%s)" % (name, p.stderr.strip()[:200]))
        back = st.load_file(os.path.join(out, "model.safetensors"))
        params = dict(model.named_parameters())
        key = (lambda k: "bridgetower." + k) if head is None else (lambda k: k)  # noqa: E731
        worst = max(maxdiff(v, back[key(k)]) if key(k) in back else float("inf") for k, v in params.items())
        own = model.state_dict()
        same_keys = {key(k) for k in own} == set(back)
        bufs_equal = all(torch.equal(own[k], back[key(k)]) for k in own if k not in params and key(k) in back)
        check(worst == 0.0 and same_keys and bufs_equal,
              "%s: bt read and re-saved all %d parameters bit for bit (max diff %g); its file has "
              "exactly HF's state_dict keys (%d, buffers included, equal)"
              % (name, len(params), worst, len(back)))


def pickle_path(tool, work):
    torch.manual_seed(7)
    with open(os.path.join(TINY, "config.json")) as f:
        cfg_dict = json.load(f)
    model = hf.BridgeTowerForImageAndTextRetrieval(BridgeTowerConfig(**cfg_dict))
    d = os.path.join(work, "hf_bin")
    os.makedirs(d, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(d, "pytorch_model.bin"))
    shutil.copyfile(os.path.join(TINY, "config.json"), os.path.join(d, "config.json"))
    p = run([tool, "--model", d], expect_rc=1)
    check("convert_checkpoint.py" in p.stderr and "safetensors only" in p.stderr,
          "pytorch_model.bin only: bt names the conversion command (%s)" % p.stderr.strip()[-200:])
    c = subprocess.run([sys.executable, os.path.join(HERE, "convert_checkpoint.py"), d], capture_output=True,
                       text=True)
    check(c.returncode == 0, "convert_checkpoint.py ran (%s)" % (c.stdout + c.stderr).strip()[-200:])
    out = d + "_bt"
    run([tool, "--model", d, "--save", out])
    back = st.load_file(os.path.join(out, "model.safetensors"))
    worst = max(maxdiff(v, back[k]) for k, v in model.named_parameters())
    check(worst == 0.0, "converted pytorch_model.bin loads bit for bit (max diff %g)" % worst)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bt-checkpoint", required=True, help="path of the bt-checkpoint binary")
    ap.add_argument("--work", default="/tmp/bt_hf_check")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    bt_to_hf(a.bt_checkpoint, a.work)
    hf_to_bt(a.bt_checkpoint, a.work)
    pickle_path(a.bt_checkpoint, a.work)
    print("\n".join(log))
    print("torch", torch.__version__, "| transformers BridgeTower from", os.path.dirname(hf.__file__))
    if failures:
        print("%d FAILURES" % len(failures))
        return 1
    print("ALL %d CHECKS PASSED" % len(log))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
