#!/usr/bin/python3
"""verify_hf_fixtures.py: the committed model fixtures (written by scripts/gen_model_fixtures.py
from the PyTorch twin) against Hugging Face transformers 4.27.1's own BridgeTower classes.

    PYTHONPATH=/tmp/hf_bt/shim /usr/bin/python3 scripts/verify_hf_fixtures.py [--dtype float32]

Needs transformers' BridgeTower importable as transformers.models.bridgetower: build the import
shim with `/usr/bin/python3 scripts/make_hf_shim.py GIT_DIR` (docs/model-parity.md "Rerun").
A one-off check of the fixtures' provenance, not part of the test suite (the suite needs no
Python); about 10 s on one thread.

For each fixture model (tests/fixtures/tiny, tiny_scaled_add, tiny_interpolate), the stored
F32 weights are loaded by key name into BridgeTowerModel and into each head class whose
gradients the fixture stores, run in --dtype (float64 by default: the precision the fixtures'
reference values were computed in) on the fixture's batch, in eval mode, and compared with the
stored tensors after rounding HF's result to F32:
  - BridgeTowerModel (output_hidden_states): every text / image hidden state (image states
    permuted from HF's sequence-first layout), the cross-modal layers' outputs, text_features,
    image_features, pooler_output;
  - each head class: its logits and loss, the ITC embeddings, and the gradient of its loss for
    every parameter of the class (grad_<head>.<key>); a stored gradient of a key the class does
    not have (another head's) must be exactly 0;
  - where the fixture holds the AdamW run (adamw.*): the three head classes sharing one
    backbone, loss_itc + loss_itm + loss_mlm, 5 steps of torch.optim.AdamW with clip-norm 1.0
    and the fixture generator's hyper-parameters and no-decay rule: the losses, the grad
    norms and every final weight.
The ITC class of 4.27.1 runs only when the vision width equals hidden_size (it adds the image
token-type row with expand_as); for the tiny fixture (Hv 64, H 32) the shim's copy with that one
line broadcast instead is used (docs/model-parity.md "One patch, for one case only").

Pass rule: max |HF - fixture| <= 1e-5 for every compared tensor (1e-4 for the grad norms), the
other heads' gradients exactly 0. Prints one line per check with the worst difference and exits
1 if any check fails.

Deliberately not here: the square-config and initialization rows of docs/model-parity.md's
table (they compare the twin run live with HF, not the fixtures) and the key-name checks of
real checkpoints (scripts/verify_hf_checkpoint.py loads the fixtures with 4.27.1's own key
matching and strict load)."""

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import safetensors_io as st  # noqa: E402
import gen_model_fixtures as gen  # noqa: E402  (hyper-parameters and the no-decay rule)
from hf427 import BridgeTowerConfig, hf, hf_bcast  # noqa: E402  (transformers 4.27.1 via the shim)

FIX = os.path.join(REPO, "tests", "fixtures")
FIXTURES = ("tiny", "tiny_scaled_add", "tiny_interpolate")
BOUND, NORM_BOUND = 1e-5, 1e-4
HEAD_CLASSES = {"itm": "BridgeTowerForImageAndTextRetrieval", "mlm": "BridgeTowerForMaskedLM",
                "itc": "BridgeTowerForContrastiveLearning"}
failures = []


def report(what, worst, bound):
    ok = worst <= bound
    print("%s %-70s max|diff| %.3g (bound %g)" % ("ok  " if ok else "FAIL", what, worst, bound))
    if not ok:
        failures.append(what)


def diff(hf_value, stored):
    """max |HF - stored| after rounding HF's value to F32 (the fixtures' storage type)."""
    if hf_value.shape != stored.shape:
        failures.append("shape %s vs %s" % (tuple(hf_value.shape), tuple(stored.shape)))
        return float("inf")
    return (hf_value.detach().to(torch.float32).double() - stored.double()).abs().max().item()


def file_key(model_key, weights):
    """The fixture's key for a model key: the file holds the ForX classes' names (backbone under
    "bridgetower."); BridgeTowerModel's own names lack that prefix."""
    return model_key if model_key in weights else "bridgetower." + model_key


def load(cls, cfg, weights, dtype):
    torch.manual_seed(0)
    model = cls(cfg).eval()
    own = model.state_dict()
    # the int64 position_ids / token_type_ids buffers are HF's own (the fixtures hold parameters only)
    sd = {k: (v if k.endswith(("position_ids", "token_type_ids")) else weights[file_key(k, weights)])
          for k, v in own.items()}
    model.load_state_dict(sd, strict=True)
    return model.to(dtype)


def head_class(head, cfg):
    if head == "itc" and cfg.vision_config.hidden_size != cfg.hidden_size:
        if hf_bcast is None:
            sys.exit("verify_hf_fixtures.py: the tiny fixture's ITC class needs the shim's "
                     "modeling_bridgetower_bcast (scripts/make_hf_shim.py writes it)")
        return hf_bcast.BridgeTowerForContrastiveLearning
    return getattr(hf, HEAD_CLASSES[head])


def head_forward(head, model, io, dtype):
    kw = dict(input_ids=io["input_ids"], attention_mask=io["attention_mask"],
              pixel_values=io["pixel_values"].to(dtype), return_dict=True)
    labels = io["itm_labels"] if head in ("itm", "itc") else io["mlm_labels"]
    return model(labels=labels, **kw)  # 4.27.1's ITC class computes its loss when labels is given


def check_backbone(name, cfg, weights, io, dtype):
    model = load(hf.BridgeTowerModel, cfg, weights, dtype)
    with torch.no_grad():
        o = model(input_ids=io["input_ids"], attention_mask=io["attention_mask"],
                  pixel_values=io["pixel_values"].to(dtype), output_hidden_states=True, return_dict=True)
    text, image, cross = o.hidden_states
    B = io["input_ids"].shape[0]
    worst = {"text_hidden": 0.0, "image_hidden": 0.0, "cross_text": 0.0, "cross_image": 0.0}
    for i, h in enumerate(text):
        worst["text_hidden"] = max(worst["text_hidden"], diff(h, io["text_hidden.%d" % i]))
    for i, h in enumerate(image):
        h = h if h.shape[0] == B else h.permute(1, 0, 2)
        worst["image_hidden"] = max(worst["image_hidden"], diff(h, io["image_hidden.%d" % i]))
    for k, (t, v) in enumerate(cross):
        worst["cross_text"] = max(worst["cross_text"], diff(t, io["cross_text.%d" % k]))
        worst["cross_image"] = max(worst["cross_image"], diff(v, io["cross_image.%d" % k]))
    counts = {"text_hidden": len(text), "image_hidden": len(image), "cross_text": len(cross),
              "cross_image": len(cross)}
    for key, w in worst.items():
        stored = sum(1 for k in io if k.startswith(key + "."))
        if counts[key] != stored:
            failures.append("%s: HF gives %d %s, the fixture stores %d" % (name, counts[key], key, stored))
        report("%s BridgeTowerModel %s.0..%d" % (name, key, counts[key] - 1), w, BOUND)
    for key in ("text_features", "image_features", "pooler_output"):
        report("%s BridgeTowerModel %s" % (name, key), diff(getattr(o, key), io[key]), BOUND)


def check_head(name, head, cfg, weights, io, dtype):
    model = load(head_class(head, cfg), cfg, weights, dtype)
    o = head_forward(head, model, io, dtype)
    report("%s %s logits" % (name, head), diff(o.logits, io[head + "_logits"]), BOUND)
    report("%s %s loss" % (name, head), diff(o.loss, io["loss_" + head]), BOUND)
    if head == "itc":
        for part in ("text", "image", "cross"):
            report("%s itc %s_embeds" % (name, part),
                   diff(getattr(o, part + "_embeds"), io["itc_%s_embeds" % part]), BOUND)
    named = list(model.named_parameters())
    grads = torch.autograd.grad(o.loss, [p for _, p in named], allow_unused=True)
    worst, seen = 0.0, set()
    for (k, p), g in zip(named, grads):
        fk = file_key(k, weights)
        seen.add(fk)
        worst = max(worst, diff(torch.zeros_like(p) if g is None else g, io["grad_%s.%s" % (head, fk)]))
    report("%s grad_%s.* (%d parameters of the class)" % (name, head, len(named)), worst, BOUND)
    others = [k for k in io if k.startswith("grad_%s." % head) and k[len(head) + 6:] not in seen]
    nonzero = [k for k in others if io[k].abs().max().item() != 0]
    report("%s grad_%s.* of the %d keys outside the class (exactly 0)" % (name, head, len(others)),
           0.0 if not nonzero else float("inf"), 0.0)


def check_adamw(name, cfg, weights, io, dtype):
    models = {h: load(head_class(h, cfg), cfg, weights, dtype) for h in ("itc", "itm", "mlm")}
    for h in ("itm", "mlm"):
        models[h].bridgetower = models["itc"].bridgetower  # one backbone, as the twin has
    named, seen = [], set()
    for h in ("itc", "itm", "mlm"):
        for k, p in models[h].named_parameters():
            if id(p) not in seen:
                seen.add(id(p))
                named.append((file_key(k, weights), p))
    groups = [{"params": [p for k, p in named if not gen.no_decay(k)], "weight_decay": gen.WD},
              {"params": [p for k, p in named if gen.no_decay(k)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=gen.LR, betas=gen.BETAS, eps=gen.EPS)
    params = [p for _, p in named]
    losses, norms = [], []
    for step in range(gen.STEPS + 1):
        opt.zero_grad(set_to_none=True)
        loss = sum(head_forward(h, models[h], io, dtype).loss for h in ("itc", "itm", "mlm"))
        losses.append(loss.detach())
        if step == gen.STEPS:
            break
        loss.backward()
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        norms.append(torch.nn.utils.clip_grad_norm_(params, gen.CLIP).detach())
        opt.step()
    report("%s adamw.loss [%d]" % (name, len(losses)), diff(torch.stack(losses), io["adamw.loss"]), BOUND)
    report("%s adamw.grad_norm [%d]" % (name, len(norms)), diff(torch.stack(norms), io["adamw.grad_norm"]),
           NORM_BOUND)
    worst = max(diff(p, io["adamw.final." + k]) for k, p in named)
    stored = sum(1 for k in io if k.startswith("adamw.final."))
    if stored != len(named):
        failures.append("%s: %d trained parameters, the fixture stores %d final weights" % (name, len(named), stored))
    report("%s adamw.final.* (%d parameters after %d steps)" % (name, len(named), gen.STEPS), worst, BOUND)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                    help="precision HF runs in (default float64, the fixtures' reference precision)")
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    torch.set_num_threads(1)
    print("HF BridgeTower from %s, run in %s" % (hf.__file__, args.dtype))
    for name in FIXTURES:
        weights = st.load_file(os.path.join(FIX, name, "model.safetensors"))
        io = st.load_file(os.path.join(FIX, name + "_io.safetensors"))
        with open(os.path.join(FIX, name, "config.json")) as f:
            cfg = BridgeTowerConfig(**json.load(f))
        check_backbone(name, cfg, weights, io, dtype)
        for head in ("itc", "itm", "mlm"):
            if any(k.startswith("grad_%s." % head) for k in io):
                check_head(name, head, cfg, weights, io, dtype)
        if "adamw.loss" in io:
            check_adamw(name, cfg, weights, io, dtype)
    if failures:
        print("%d check(s) FAILED: %s" % (len(failures), "; ".join(failures[:5])))
        return 1
    print("ALL CHECKS PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
