#!/usr/bin/python3
"""verify_hf_checkpoint.py: checkpoints written by bt open in Hugging Face transformers'
BridgeTower classes, and checkpoints written the way transformers writes them open in bt.

    PYTHONPATH=/tmp/hf_bt/shim /usr/bin/python3 scripts/verify_hf_checkpoint.py \
        --bt-checkpoint BUILD/src/model/bt-checkpoint [--work /tmp/bt_hf_check]

(bt-forward, bt-train and bt-data are taken from the same BUILD directory unless --bt-forward,
--bt-train, --bt-data name them; `ninja -C BUILD src/model/bt-checkpoint src/model/bt-forward
src/train/bt-train src/data/bt-data` builds the four.)

Needs a transformers 4.27.1 BridgeTower (modeling_bridgetower.py + configuration_bridgetower.py)
importable as transformers.models.bridgetower; transformers itself is not installable on the
build machines, so docs/checkpoints.md records the run made against the 4.27.1 source files
with a minimal import shim, which scripts/make_hf_shim.py builds outside the repo from a git
directory of transformers 4.27.1 (the fetch tool's github:xiaojunjun65/transformers-mlu_4.27.1):

    /usr/bin/python3 scripts/make_hf_shim.py /work/.mirror/xiaojunjun65+transformers-mlu_4.27.1/repo

A one-off compatibility check, not part of the test suite.

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
D. The trainer's output. bt-train runs 3 steps of ITC+ITM+MLM (dropout on) on a bt-data synth
   set with configs/synthetic-model, saving checkpoint-2/ and checkpoint-3/ and the final model
   dir. For a checkpoint dir and the final dir, the checks of A (config, metadata, architectures,
   4.27.1 key matching with no missing key for each class whose heads are present, strict load),
   then HF's forward of each class on fixed inputs (padded captions, ITM and MLM labels)
   reproduces bt-forward's outputs from the same directory to 1e-5 (the bound of A). Hv = H in
   this model, so the unchanged 4.27.1 ITC class runs. Reverse: each HF class, built from the
   same config with HF's init and written as save_pretrained writes it (plus the tokenizer
   files), is bt-train's model.path for one step: no unexpected/ignored keys, no warning,
   initialized-head notices only for heads the class lacks; and the step started from HF's
   weights (with constant lr and no weight decay, AdamW's first step moves each weight by at
   most lr, so every weight ends within lr of HF's; the unused text pooler stays bit-equal).
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
from hf427 import BridgeTowerConfig, hf, hf_bcast  # noqa: E402  (transformers 4.27.1 via the shim)

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
    # 4.27.1 renames legacy file keys first (_fix_key): "beta" -> "bias", "gamma" -> "weight".
    weights = {(k.replace("beta", "bias") if "beta" in k else k.replace("gamma", "weight") if "gamma" in k
                else k): v for k, v in weights.items()}
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


ARCH = {"itc": "BridgeTowerForContrastiveLearning", "itm": "BridgeTowerForImageAndTextRetrieval",
        "mlm": "BridgeTowerForMaskedLM"}


def load_hf_dir(name, out, ref, want_dtype):
    """What from_pretrained does with a bt-written directory: BridgeTowerConfig(**config.json)
    must have the dimensions of `ref` (a config.json dict); then metadata, architectures and
    torch_dtype; then, for every HF class whose heads are in the file, 4.27.1's key matching
    and load_state_dict(strict=True). Returns [(head, cls, model, sd)] for the classes that
    loaded (sd: model key -> fp32 tensor) and the config."""
    with open(os.path.join(out, "config.json")) as f:
        cfg_dict = json.load(f)
    cfg = BridgeTowerConfig(**cfg_dict)
    same = (cfg.hidden_size == ref["hidden_size"] and cfg.num_hidden_layers == ref["num_hidden_layers"]
            and cfg.text_config.vocab_size == ref["text_config"]["vocab_size"]
            and cfg.text_config.num_hidden_layers == ref["text_config"]["num_hidden_layers"]
            and cfg.vision_config.hidden_size == ref["vision_config"]["hidden_size"]
            and cfg.vision_config.image_size == ref["vision_config"]["image_size"]
            and cfg.vision_config.patch_size == ref["vision_config"]["patch_size"]
            and cfg.contrastive_hidden_size == ref["contrastive_hidden_size"]
            and cfg.link_tower_type == "add" and cfg_dict["model_type"] == "bridgetower")
    check(same, "%s: BridgeTowerConfig(**config.json) has the reference config's dimensions" % name)
    weights, meta = st.load_file(os.path.join(out, "model.safetensors"), with_metadata=True)
    check(meta.get("format") == "pt", "%s: __metadata__ format = pt (%s)" % (name, meta))
    present = heads_in(weights)
    want_arch = [ARCH[h] for h in ("itc", "itm", "mlm") if h in present] or ["BridgeTowerModel"]
    check(cfg_dict["architectures"] == want_arch, "%s: architectures %s" % (name, cfg_dict["architectures"]))
    check(cfg_dict["torch_dtype"] == want_dtype, "%s: torch_dtype %s" % (name, cfg_dict["torch_dtype"]))
    loaded = []
    for head, cls in CLASSES.items():
        if head is not None and head not in present:
            continue
        torch.manual_seed(0)
        model = cls(cfg).eval()
        sd, missing, unexpected = hf427_key_match(cls, model, weights)
        check(not missing, "%s/%s: from_pretrained (4.27.1 key logic) misses nothing (%s)"
              % (name, cls.__name__, missing[:3]))
        foreign = [k for k in unexpected if not any(k.startswith(p) for hk in HEAD_KEYS.values() for p in hk)]
        check(not foreign, "%s/%s: unexpected keys are other heads' only (%d; foreign %s)"
              % (name, cls.__name__, len(unexpected), foreign[:3]))
        sd = {k: (v.float() if v.is_floating_point() else v) for k, v in sd.items()}
        try:
            model.load_state_dict(sd, strict=True)
        except RuntimeError as e:
            check(False, "%s/%s: load_state_dict(strict=True): %s" % (name, cls.__name__, str(e)[:300]))
            continue
        check(True, "%s/%s: load_state_dict(strict=True) of the file's tensors (%d parameters, "
              "buffers included)" % (name, cls.__name__, len(list(model.parameters()))))
        loaded.append((head, cls, model, sd))
    return loaded, cfg


def hf_outputs(head, model, sd, cfg, io):
    """HF's forward of one class on io (input_ids, attention_mask, pixel_values, itm_labels,
    mlm_labels), under bt-forward's output names; None when 4.27.1's ITC forward cannot run
    this config (Hv != H) and the shim has no broadcast copy."""
    kw = dict(input_ids=io["input_ids"], attention_mask=io["attention_mask"],
              pixel_values=io["pixel_values"], return_dict=True)
    with torch.no_grad():
        if head is None:
            o = model(**kw)
            return {"pooler_output": o.pooler_output, "text_features": o.text_features,
                    "image_features": o.image_features}
        if head in ("itm", "mlm"):
            o = model(labels=io[head + "_labels"], **kw)
            return {"logits": o.logits, "loss": o.loss}
        runner = model
        if cfg.vision_config.hidden_size != cfg.hidden_size:
            if hf_bcast is None:
                return None
            runner = hf_bcast.BridgeTowerForContrastiveLearning(cfg).eval()
            runner.load_state_dict(sd, strict=True)
        o = runner(labels=io["itm_labels"], **kw)  # 4.27.1 computes the ITC loss when labels is given
        return {"logits": o.logits, "loss": o.loss, "text_embeds": o.text_embeds,
                "image_embeds": o.image_embeds, "cross_embeds": o.cross_embeds}


# Part A: fixture tensor for each bt-forward output name, per head.
FIXTURE_NAMES = {None: {"pooler_output": "pooler_output", "text_features": "text_features",
                        "image_features": "image_features"},
                 "itm": {"logits": "itm_logits", "loss": "loss_itm"},
                 "mlm": {"logits": "mlm_logits", "loss": "loss_mlm"},
                 "itc": {"logits": "itc_logits", "loss": "loss_itc"}}


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
        bf16 = "bf16" in name
        loaded, cfg = load_hf_dir(name, out, fix_cfg, "bfloat16" if bf16 else "float32")
        for head, cls, model, sd in loaded:
            if bf16:
                params = dict(model.named_parameters())
                fk = bt_key(head)
                d = max(maxdiff(params[k], fixture[fk(k)].to(torch.bfloat16).float()) for k in params)
                check(d == 0.0, "%s/%s: weights = bf16(fixture) exactly (max diff %g)" % (name, cls.__name__, d))
                continue
            hf_out = hf_outputs(head, model, sd, cfg, io)
            if hf_out is None:
                log.append("skip %s/%s forward: the tiny fixture has Hv != H, which 4.27.1's ITC "
                           "forward cannot run (loading was checked)" % (name, cls.__name__))
                continue
            d = max(maxdiff(hf_out[k], io[fk]) for k, fk in FIXTURE_NAMES[head].items())
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


def fresh_hf_dirs(model_dir, work, prefix, seed, copy_aux):
    """Each HF class (head, cls) built from model_dir/config.json with HF's init (seed + i) and
    written by write_hf_dir into work/<prefix><class>, plus model_dir's other files (tokenizer,
    preprocessor) with copy_aux. Yields (head, cls, model, name, dir)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg_dict = json.load(f)
    for i, (head, cls) in enumerate(CLASSES.items()):
        torch.manual_seed(seed + i)
        model = cls(BridgeTowerConfig(**cfg_dict))
        name = prefix + cls.__name__
        src = os.path.join(work, name)
        write_hf_dir(src, model, cfg_dict, cls.__name__)
        for f in os.listdir(model_dir) if copy_aux else ():
            if f not in ("config.json", "README.md"):
                shutil.copyfile(os.path.join(model_dir, f), os.path.join(src, f))
        yield head, cls, model, name, src


def bt_key(head):
    """bt's key of an HF parameter name: bt saves the backbone with the `bridgetower.` prefix,
    which a bare BridgeTowerModel (head None) does not have."""
    return (lambda k: "bridgetower." + k) if head is None else (lambda k: k)  # noqa: E731


def hf_to_bt(tool, work):
    for head, cls, model, name, src in fresh_hf_dirs(TINY, work, "hf_", 100, copy_aux=False):
        n_buf = sum(1 for k in model.state_dict() if k.endswith(("position_ids", "token_type_ids")))
        out = src + "_bt"
        p = run([tool, "--model", src, "--save", out])
        check("%d legacy buffers skipped" % n_buf in p.stdout,
              "%s: bt skipped the %d int64 buffers (%s)" % (name, n_buf, p.stdout.strip().splitlines()[-2:]))
        check("unexpected" not in p.stderr and "notice" not in p.stderr,
              "%s: no unexpected keys, no initialized heads (%s)" % (name, p.stderr.strip()[:200]))
        back = st.load_file(os.path.join(out, "model.safetensors"))
        params = dict(model.named_parameters())
        key = bt_key(head)
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


SYNTH_MODEL = os.path.join(REPO, "configs", "synthetic-model")


def train_config(path, out, data, model, heads, steps, extra_train=None, save_steps=None):
    """A bt-train run config: `model` is ("config" | "path", dir); one loss per head, weight 1."""
    train = {"batch_size": 8, "max_steps": steps, "lr": 1e-3, "schedule": "constant",
             "loss_weights": {h: (1 if h in heads else 0) for h in ("itc", "itm", "mlm")},
             "seed": 5, "dropout": True, "threads": 1}
    train.update(extra_train or {})
    cfg = {"model": {model[0]: model[1], "init_seed": 0, "heads": heads},
           "data": {"train": os.path.join(data, "train.jsonl"), "max_length": 32, "seed": 1,
                    "drop_last": True, "num_workers": 1},
           "train": train,
           "logging": {"steps": 1, "tensorboard": False, "report": False},
           "eval": {"strategy": "no", "at_end": False},
           "save": ({"strategy": "steps", "steps": save_steps} if save_steps else {"strategy": "no"}),
           "output": {"dir": out}}
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def fixed_inputs(ref, work):
    """Fixed bt-forward / HF inputs for the model of config dict `ref`: B 4, T 12, captions of
    lengths 12, 9, 7, 5 (<s> ... </s>, then pad id 1 with mask 0), pixel_values in [-1, 1), ITM
    labels 1 0 1 0, MLM labels on every third inner token (-100 elsewhere). Writes the three
    bt-forward input files (no labels / ITM labels / MLM labels); returns (io, files)."""
    g = torch.Generator().manual_seed(11)
    b, t, r = 4, 12, ref["vision_config"]["image_size"]
    ids = torch.randint(3, ref["text_config"]["vocab_size"], (b, t), generator=g)
    mask = torch.zeros(b, t, dtype=torch.int64)
    mlm = torch.full((b, t), -100, dtype=torch.int64)
    for i, n in enumerate((12, 9, 7, 5)):
        mask[i, :n] = 1
        ids[i, 0], ids[i, n - 1] = 0, 2
        ids[i, n:] = 1
        mlm[i, 1:n - 1:3] = ids[i, 1:n - 1:3]
    io = {"input_ids": ids, "attention_mask": mask,
          "pixel_values": torch.rand(b, 3, r, r, generator=g) * 2 - 1,
          "itm_labels": torch.tensor([1, 0, 1, 0]), "mlm_labels": mlm}
    base = {k: io[k] for k in ("input_ids", "attention_mask", "pixel_values")}
    files = {}
    for head in (None, "itm", "mlm", "itc"):
        files[head] = os.path.join(work, "inputs_%s.safetensors" % head)
        labels = {"labels": io[head + "_labels"]} if head in ("itm", "mlm") else {}
        st.save_file(dict(base, **labels), files[head])
    return io, files


def trainer_to_hf(tools, work, synth):
    """Part D, forward: bt-train's checkpoint-<step>/ and final directories open in HF and HF's
    forward reproduces bt-forward's outputs from the same directory."""
    with open(os.path.join(SYNTH_MODEL, "config.json")) as f:
        ref = json.load(f)
    out = os.path.join(work, "train_out")
    cfg_path = os.path.join(work, "train_run.json")
    train_config(cfg_path, out, synth, ("config", SYNTH_MODEL), ["itc", "itm", "mlm"], 3, save_steps=2)
    p = run([tools["bt-train"], "--config", cfg_path, "--quiet-config"])
    check("warning" not in p.stderr.lower(), "bt-train ITC+ITM+MLM 3 steps: no warning (%s)" % p.stderr.strip()[-200:])
    io, files = fixed_inputs(ref, work)
    for name, d in (("train_checkpoint-2", os.path.join(out, "checkpoint-2")), ("train_final", out)):
        if "checkpoint" in name:
            extra = [f for f in ("optimizer.safetensors", "trainer_state.json") if os.path.exists(os.path.join(d, f))]
            check(len(extra) == 2, "%s: holds optimizer.safetensors and trainer_state.json next to the model "
                  "(HF's loader reads config.json and model.safetensors only) (%s)" % (name, extra))
        loaded, cfg = load_hf_dir(name, d, ref, "float32")
        check(len(loaded) == 4, "%s: all four HF classes loaded (%d)" % (name, len(loaded)))
        for head, cls, model, sd in loaded:
            hf_out = hf_outputs(head, model, sd, cfg, io)
            res = os.path.join(work, "%s_%s_bt.safetensors" % (name, head))
            cmd = [tools["bt-forward"], "--model", d, "--inputs", files[head], "--output", res, "--threads", "1"]
            p = run(cmd + (["--head", head] if head else []))
            if p.returncode != 0:
                continue
            bt = st.load_file(res)
            missing = sorted(set(hf_out) - set(bt))
            d_max = max(maxdiff(v, bt[k]) for k, v in hf_out.items() if k in bt)
            check(not missing and d_max <= 1e-5, "%s/%s: HF forward reproduces bt-forward's %s (max diff %.3g%s)"
                  % (name, cls.__name__, ", ".join(sorted(hf_out)), d_max,
                     "; bt lacks %s" % missing if missing else ""))
    final = st.load_file(os.path.join(out, "model.safetensors"))
    last = st.load_file(os.path.join(out, "checkpoint-3", "model.safetensors"))
    same = set(final) == set(last) and all(torch.equal(final[k], last[k]) for k in final)
    check(same, "train_final: model.safetensors equals checkpoint-3's (the last step) bit for bit")


def hf_to_trainer(tools, work, synth):
    """Part D, reverse: a save_pretrained-style directory of each fresh HF class is bt-train's
    model.path; one step runs without key complaints and starts from HF's weights."""
    lr = 1e-4
    # The tokenizer and preprocessor files go with the weights, as a Hub model directory has them.
    for head, cls, model, name, src in fresh_hf_dirs(SYNTH_MODEL, work, "hfinit_", 200, copy_aux=True):
        heads = [head] if head else ["itc", "itm", "mlm"]
        out = src + "_trained"
        cfg_path = src + "_run.json"
        train_config(cfg_path, out, synth, ("path", src), heads, 1,
                     extra_train={"lr": lr, "weight_decay": 0.0, "max_grad_norm": 0})
        p = run([tools["bt-train"], "--config", cfg_path, "--quiet-config"])
        text = (p.stdout + p.stderr).lower()
        complaints = [w for w in ("unexpected", "ignored", "warning", "error", "mismatch") if w in text]
        check(not complaints and "completed at step 1" in text,
              "%s as bt-train's model.path: one step, no key complaints (%s)" % (name, complaints))
        n_init = text.count("not in checkpoint, initialized")
        want_init = 0 if head else 3
        check(n_init == want_init, "%s: %d initialized-head notice(s), want %d (heads the class lacks)"
              % (name, n_init, want_init))
        if p.returncode != 0:
            continue
        back = st.load_file(os.path.join(out, "model.safetensors"))
        key = bt_key(head)
        params = dict(model.named_parameters())
        absent = [k for k in params if key(k) not in back]
        deltas = {k: maxdiff(v, back[key(k)]) for k, v in params.items() if key(k) in back}
        worst, pooler = max(deltas.values()), [k for k in deltas if "text_model.pooler." in k]
        # AdamW's first step: |m_hat / (sqrt(v_hat) + eps)| < 1, so |dw| <= lr with weight decay 0;
        # 1e-6 covers the fp32 rounding of w - dw for |w| up to ~8. A re-initialized model would be
        # ~0.02 away (HF's init std), a model that did not step 0 away.
        check(not absent and worst <= lr + 1e-6 and worst >= 0.5 * lr,
              "%s: the trained weights are within lr=%g of HF's (max %.7g, moved), all %d present%s"
              % (name, lr, worst, len(params), "; absent %s" % absent[:3] if absent else ""))
        check(pooler and all(deltas[k] == 0.0 for k in pooler),
              "%s: the unused text pooler (%d tensors) is HF's, bit for bit" % (name, len(pooler)))


def trainer_output(tools, work):
    synth = os.path.join(work, "synth")
    run([tools["bt-data"], "synth", "--out", synth, "--train", "32", "--val", "8", "--test", "8",
         "--seed", "0", "--size", "64"])
    trainer_to_hf(tools, work, synth)
    hf_to_trainer(tools, work, synth)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bt-checkpoint", required=True, help="path of the bt-checkpoint binary")
    ap.add_argument("--bt-forward", help="default: BUILD/src/model/bt-forward, BUILD from --bt-checkpoint")
    ap.add_argument("--bt-train", help="default: BUILD/src/train/bt-train")
    ap.add_argument("--bt-data", help="default: BUILD/src/data/bt-data")
    ap.add_argument("--work", default="/tmp/bt_hf_check")
    a = ap.parse_args(argv)
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(a.bt_checkpoint))))
    tools = {"bt-forward": a.bt_forward or os.path.join(build, "src", "model", "bt-forward"),
             "bt-train": a.bt_train or os.path.join(build, "src", "train", "bt-train"),
             "bt-data": a.bt_data or os.path.join(build, "src", "data", "bt-data")}
    torch.set_num_threads(1)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    bt_to_hf(a.bt_checkpoint, a.work)
    hf_to_bt(a.bt_checkpoint, a.work)
    pickle_path(a.bt_checkpoint, a.work)
    trainer_output(tools, a.work)
    print("\n".join(log))
    print("torch", torch.__version__, "| transformers BridgeTower from", os.path.dirname(hf.__file__))
    if failures:
        print("%d FAILURES" % len(failures))
        return 1
    print("ALL %d CHECKS PASSED" % len(log))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
