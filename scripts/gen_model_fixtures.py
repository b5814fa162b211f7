"""gen_model_fixtures.py: writes the whole-model fixtures the C model tests compare against.

Run:  /usr/bin/python3 scripts/gen_model_fixtures.py        (from anywhere; a few seconds, 1 thread)

Writes (contract: docs/fixtures-spec.md; contents described in docs/model-parity.md):
  tests/fixtures/tiny/                 HF model dir: config.json, preprocessor_config.json, model.safetensors
  tests/fixtures/tiny_io.safetensors   batch, forward outputs and intermediates, per-loss gradients,
                                       a 5-step AdamW run
  tests/fixtures/tiny_scaled_add/ + tiny_scaled_add_io.safetensors      link_tower_type "scaled_add"
  tests/fixtures/tiny_interpolate/ + tiny_interpolate_io.safetensors    link_tower_type "interpolate"
                                       (variants: forward outputs and grad_itm.* only)
  configs/tiny/config.json, preprocessor_config.json                    copies, for users

Everything comes from scripts/bt_reference.py (the PyTorch twin, checked against transformers 4.27.1)
in eval mode (dropout off) with gradients enabled, from fixed seeds. The weights are drawn by HF's
init rules, the Linear weights of the text encoder, the cross layers and the ITC heads are
multiplied by MIX_GAIN (see MIX_GAIN), then biases, LayerNorm parameters, logit_scale and the link-tower scalars
are perturbed so that no parameter sits at 0, 1 or its init value where a bug could hide. The
weights are stored as F32; every reference value (forward outputs, losses, gradients, the AdamW
run) is computed in float64 from those F32 weights and batch (upcast exactly) and rounded to F32
once when stored, so the fixture is the correctly rounded value, not one fp32 summation order.

Deliberately not here: the real checkpoints (too big to commit), dropout (random streams cannot be
matched by a C engine), bf16, fp32 reference values (the generator prints how far an fp32 run of
the twin is from the stored float64 values, as a diagnostic).
"""

import copy
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bt_reference as bt          # noqa: E402
import safetensors_io as st        # noqa: E402

ROOT = os.path.dirname(HERE)
FIX = os.path.join(ROOT, "tests", "fixtures")
SEED_WEIGHTS = 1234      # HF init draws
SEED_PERTURB = 4321      # bias / LayerNorm / scalar perturbation
SEED_BATCH = 2024        # token ids, pixels
REF_DTYPE = torch.float64  # precision of every stored reference value (stored rounded to F32)

# HF draws every BERT-side Linear weight (text encoder, cross layers, heads) from N(0, 0.05^2)
# whatever the width, so a layer's gain std * sqrt(fan_in) is 0.05 * sqrt(768) = 1.4 in the base
# model but only 0.05 * sqrt(32) = 0.28 at the tiny width (the CLIP vision rule scales with width and
# is not affected). At that gain the tiny text layers barely mix tokens into the CLS row, and the ITC
# heads' outputs carry a large share of their (perturbed) bias, the same for every example: with
# gain 1 the 3 examples' ITC text embeddings have cosines 0.9995-0.9998 (cross 0.987-0.997, loss_itc
# 1.09706 ~ ln 3), so the ITC gradient is a difference of nearly equal terms and fp32 (torch's as
# much as bt's) gets it only to ~2e-5 of its scale. Gain 3 (std 0.15) on the text encoder, the cross
# layers and the ITC heads brings the text cosines to ~0.98 and the cross ones to 0.87-0.90
# (loss_itc 1.397: the softmax rows are no longer uniform) and fp32 to ~4e-6. Much larger gains
# sharpen the attention until the query / key gradients become the ill-conditioned ones (gain 4.9,
# the base model's gain, makes the fp32 ITM and MLM gradients ~20x worse than gain 1).
# Measured effect: docs/model-parity.md "Fixture contents".
MIX_GAIN = 3.0
MASK_ID = 98             # stand-in for <mask> (the real one is 50264 = vocab_size - 1)

# eps 1e-6, not torch's default 1e-8: parameters whose true gradient is 0 (every attention key bias,
# incl. the K third of the vision in_proj_bias: softmax ignores a per-row constant) or tiny carry
# rounding noise of ~1e-9; with eps 1e-8 Adam turns that noise into steps of up to ~lr/10 whose size
# depends on summation order, so no other implementation (HF itself: 2e-4) could match adamw.final.
# With 1e-6 HF and the twin agree to 3e-6 after 5 steps (docs/model-parity.md).
LR, BETAS, EPS, WD, CLIP, STEPS = 1e-3, (0.9, 0.999), 1e-6, 0.01, 1.0, 5
NO_DECAY_RULE = ('no weight decay iff the key ends with "bias" or contains one of "LayerNorm", '
                 '"layernorm", "ln_", "norm" (= every nn.LayerNorm parameter and every bias, the HF '
                 'Trainer rule); all other parameters (incl. embeddings, class/position embeddings, '
                 'logit_scale, scaled_factor, beta) decay')


def no_decay(key):
    return key.endswith("bias") or any(s in key for s in ("LayerNorm", "layernorm", "ln_", "norm"))


def tiny_config_dict(link_tower_type="add"):
    text = dict(architectures=["BridgeTowerTextModel"], model_type="bridgetower_text_model",
                vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                intermediate_size=64, hidden_act="gelu", hidden_dropout_prob=0.1,
                attention_probs_dropout_prob=0.1, max_position_embeddings=40, type_vocab_size=1,
                initializer_factor=1, initializer_range=0.02, layer_norm_eps=1e-05, pad_token_id=1,
                bos_token_id=0, eos_token_id=2, position_embedding_type="absolute", use_cache=True,
                classifier_dropout=None)
    vision = dict(architectures=["BridgeTowerVisionModel"], model_type="bridgetower_vision_model",
                  hidden_size=64, num_hidden_layers=3, num_channels=3, patch_size=8, image_size=32,
                  initializer_factor=1, layer_norm_eps=1e-05, stop_gradient=False, share_layernorm=True,
                  remove_last_layer=False)
    return dict(architectures=["BridgeTowerForContrastiveLearning"], model_type="bridgetower",
                contrastive_hidden_size=16, hidden_act="gelu", hidden_size=32,
                init_layernorm_from_vision_encoder=False, initializer_factor=1, layer_norm_eps=1e-05,
                link_tower_type=link_tower_type, logit_scale_init_value=2.6592, num_attention_heads=2,
                num_hidden_layers=3, share_cross_modal_transformer_layers=True,
                share_link_tower_layers=False, tie_word_embeddings=False, text_config=text,
                vision_config=vision)


def tiny_preprocessor_dict():
    return dict(image_processor_type="BridgeTowerImageProcessor", processor_class="BridgeTowerProcessor",
                do_resize=True, size={"shortest_edge": 32}, size_divisor=32, resample=3,
                do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                image_mean=[0.48145466, 0.4578275, 0.40821073],
                image_std=[0.26862954, 0.26130258, 0.27577711],
                do_center_crop=True, crop_size=None, do_pad=True)


def make_batch(cfg):
    """B = 3, T = 12: row 0 unpadded, rows 1 and 2 padded at the end (lengths 9 and 6);
    5 MLM targets (3 replaced by MASK_ID, 1 by a random token, 1 left unchanged); ITM labels 1,0,1."""
    g = torch.Generator().manual_seed(SEED_BATCH)
    B, T, V = 3, 12, cfg.text.vocab_size
    lengths = [12, 9, 6]
    ids = torch.full((B, T), cfg.text.pad_token_id, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, 0] = cfg.text.bos_token_id
        ids[b, 1:n - 1] = torch.randint(3, MASK_ID, (n - 2,), generator=g)
        ids[b, n - 1] = cfg.text.eos_token_id
    mask = (ids != cfg.text.pad_token_id).long()
    mlm_labels = torch.full((B, T), -100, dtype=torch.long)
    for (b, t, how) in [(0, 3, "mask"), (0, 7, "random"), (1, 2, "mask"), (1, 6, "keep"), (2, 4, "mask")]:
        mlm_labels[b, t] = ids[b, t]
        if how == "mask":
            ids[b, t] = MASK_ID
        elif how == "random":
            ids[b, t] = (ids[b, t] + 17 - 3) % (MASK_ID - 3) + 3
    pixels = torch.randn(B, 3, cfg.vision.image_size, cfg.vision.image_size, generator=g)
    itm_labels = torch.tensor([1, 0, 1], dtype=torch.long)
    return dict(input_ids=ids, attention_mask=mask, pixel_values=pixels, itm_labels=itm_labels,
                mlm_labels=mlm_labels)


@torch.no_grad()
def perturb_(model):
    """Moves every zero- or one-initialized parameter off its init value, in named_parameters order."""
    g = torch.Generator().manual_seed(SEED_PERTURB)
    mods = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            mods[(mname + "." if mname else "") + pname] = (mod, pname)
    for key, p in model.named_parameters():
        mod, pname = mods[key]
        r = torch.randn(p.shape, generator=g)
        if isinstance(mod, torch.nn.LayerNorm) and pname == "weight":
            p.add_(0.2 * r)
        elif pname.endswith("bias"):                      # LN, Linear, in_proj, mlm_score biases
            p.add_(0.05 * r)
        elif pname == "logit_scale":
            p.add_(0.1 * r)
        elif pname == "scaled_factor":   # 1 -> 1 +- [0.2, 0.5): far enough from 1 to matter
            p.add_(torch.sign(r) * (0.2 + 0.3 * torch.rand(p.shape, generator=g)))
        elif pname == "beta":            # 0.5 -> 0.5 +- [0.1, 0.3): (1-beta) vs beta swaps show
            p.add_(torch.sign(r) * (0.1 + 0.2 * torch.rand(p.shape, generator=g)))


def mixing_linear(key):
    """The Linear weights mix_gain_ scales: every nn.Linear of the text encoder layers and of the
    cross-modal layers (query, key, value, attention output, intermediate, output), and the three
    ITC heads' fc."""
    if key.startswith("itc_") and key.endswith(".fc.weight"):
        return True
    return key.endswith(".weight") and any(
        s in key for s in ("text_model.encoder.layer.", "cross_modal_text_layers.",
                           "cross_modal_image_layers.")) and "LayerNorm" not in key


@torch.no_grad()
def mix_gain_(model):
    """Multiplies the weights selected by mixing_linear by MIX_GAIN (see MIX_GAIN)."""
    for key, p in model.named_parameters():
        if mixing_linear(key):
            assert p.dim() == 2, key
            p.mul_(MIX_GAIN)


def build_model(cfg):
    torch.manual_seed(0)  # module construction draws; everything is overwritten below
    model = bt.BridgeTowerTwin(cfg, heads=bt.HEADS_ALL)
    bt.hf_init_(model, torch.Generator().manual_seed(SEED_WEIGHTS))
    mix_gain_(model)
    perturb_(model)
    model.eval()  # dropout off; gradients stay enabled
    return model


def run(model, batch):
    """The twin's forward in the model's dtype (the pixels are cast to it; exact for F32 -> F64)."""
    dtype = next(model.parameters()).dtype
    return model(batch["input_ids"], batch["attention_mask"], batch["pixel_values"].to(dtype),
                 itm_labels=batch["itm_labels"], mlm_labels=batch["mlm_labels"])


def reference_model(model):
    """A REF_DTYPE copy of `model` (the F32 weights upcast exactly), in eval mode."""
    return copy.deepcopy(model).to(REF_DTYPE).eval()


def to_f32(tensors):
    """Rounds the floating tensors of a dict to F32 (once, round to nearest); integers unchanged."""
    return {k: (v.to(torch.float32) if v.is_floating_point() else v) for k, v in tensors.items()}


def forward_tensors(cfg, out, batch):
    t = {}
    t["position_ids"] = bt.position_ids_from_input_ids(batch["input_ids"], cfg.text.pad_token_id)
    for i, h in enumerate(out["text_hidden"]):
        t["text_hidden.%d" % i] = h
    for i, h in enumerate(out["image_hidden"]):
        t["image_hidden.%d" % i] = h
    for k in range(len(out["cross_text"])):
        t["cross_text_in.%d" % k] = out["cross_text_in"][k]
        t["cross_image_in.%d" % k] = out["cross_image_in"][k]
        t["cross_text.%d" % k] = out["cross_text"][k]
        t["cross_image.%d" % k] = out["cross_image"][k]
    for name in ("text_features", "image_features", "pooler_output", "itm_logits", "loss_itm",
                 "mlm_logits", "loss_mlm", "itc_text_embeds", "itc_image_embeds", "itc_cross_embeds",
                 "itc_logits", "loss_itc"):
        t[name] = out[name]
    return {k: v.detach().clone() for k, v in t.items()}


def loss_grads(model, loss):
    """Gradient of `loss` w.r.t. every parameter (zeros where the loss does not depend on it)."""
    names, params = zip(*model.named_parameters())
    gs = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    return {n: (torch.zeros_like(p) if g is None else g.detach().clone()) for n, p, g in zip(names, params, gs)}


def adamw_run(model, batch):
    """5 steps of torch.optim.AdamW on loss_itc + loss_itm + loss_mlm (same batch each step),
    global clip-norm 1.0 before each step, in the model's dtype (main passes the float64 copy, so
    the whole trajectory is float64; only the stored results are rounded to F32).
    Parameters that receive no gradient (the unused text_model.pooler) get an explicit zero
    gradient, so AdamW still applies weight decay to them (torch would skip a parameter whose .grad
    is None)."""
    named = list(model.named_parameters())
    groups = [{"params": [p for k, p in named if not no_decay(k)], "weight_decay": WD},
              {"params": [p for k, p in named if no_decay(k)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS)
    params = [p for _, p in named]
    losses, norms = [], []
    for step in range(STEPS + 1):
        opt.zero_grad(set_to_none=True)
        out = run(model, batch)
        loss = out["loss_itc"] + out["loss_itm"] + out["loss_mlm"]
        losses.append(loss.item())
        if step == STEPS:
            break
        loss.backward()
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, CLIP)))
        opt.step()
    final = {"adamw.final." + k: p.detach().clone() for k, p in named}
    return losses, norms, final


def write_json(path, d):
    with open(path, "w") as f:
        json.dump(d, f, indent=2)
        f.write("\n")


def write_model_dir(dirpath, cfg_dict, model, meta):
    os.makedirs(dirpath, exist_ok=True)
    write_json(os.path.join(dirpath, "config.json"), cfg_dict)
    write_json(os.path.join(dirpath, "preprocessor_config.json"), tiny_preprocessor_dict())
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    st.save_file(weights, os.path.join(dirpath, "model.safetensors"), meta)
    return weights


def metadata(cfg_dict, extra=None):
    m = {"generator": "scripts/gen_model_fixtures.py (twin: scripts/bt_reference.py)",
         "torch_version": torch.__version__,
         "seeds": json.dumps({"weights": SEED_WEIGHTS, "perturb": SEED_PERTURB, "batch": SEED_BATCH}),
         "config": json.dumps(cfg_dict, sort_keys=True),
         "mode": "eval mode (dropout off), gradients enabled; weights F32 (the stored ones); every "
                 "reference value computed in float64 from the F32 weights and inputs (upcast exactly), "
                 "stored rounded to F32 once",
         "mix_gain": "Linear weights of the text encoder, the cross layers and the ITC heads x %g "
                     "after HF init, before the perturbation" % MIX_GAIN,
         "loss_itc": "HF: (CE(s*T@I^T) + CE(s*T@C^T) + CE(s*I@C^T))/3, s = exp(logit_scale), targets arange(B)",
         "loss_itm": "mean CE(itm_logits, itm_labels)",
         "loss_mlm": "mean CE over positions with mlm_labels != -100"}
    if extra:
        m.update(extra)
    return m


def verify_roundtrip(cfg, model_path, io_path):
    """Reloads the written files into a fresh twin (F32 weights, then REF_DTYPE) and checks the
    forward outputs, rounded to F32, bit for bit."""
    fresh = bt.BridgeTowerTwin(cfg, heads=bt.HEADS_ALL)
    bt.load_weights(fresh, st.load_file(model_path))
    fresh = reference_model(fresh)
    io = st.load_file(io_path)
    batch = {k: io[k] for k in ("input_ids", "attention_mask", "pixel_values", "itm_labels", "mlm_labels")}
    out = to_f32(forward_tensors(cfg, run(fresh, batch), batch))
    for k, v in out.items():
        if not torch.equal(v, io[k]):
            raise SystemExit("round trip mismatch in %s (%s)" % (k, io_path))


def size_of(path):
    return os.path.getsize(path)


def fp32_diagnostic(label, model, batch, io, losses):
    """Prints how far an fp32 run of the twin (torch's own summation order) is from the stored
    reference, per loss: the worst max|a-b| / max|b| over the gradient tensors (attention key biases,
    whose exact gradient is 0, left out) and the worst ratio |a-b| / (1e-5 max|b| + 1e-5 |b|) (the
    C parity tests' bound; <= 1 passes). Not stored: it shows the margin the fixture now has."""
    out = run(model, batch)
    for name in losses:
        worst, worst_ratio, at = 0.0, 0.0, ""
        for k, g in loss_grads(model, out["loss_" + name]).items():
            ref = io["grad_%s.%s" % (name, k)].double()
            mb = ref.abs().max().item()
            if k.endswith(".key.bias") or mb == 0:
                continue
            d = (g.double() - ref).abs()
            r = (d / (1e-5 * mb + 1e-5 * ref.abs())).max().item()
            if d.max().item() / mb > worst:
                worst, at = d.max().item() / mb, k
            worst_ratio = max(worst_ratio, r)
        print("%s: fp32 twin vs stored grad_%s: worst err/max|b| %.2e (%s), worst ratio to the "
              "1e-5 rule %.2f" % (label, name, worst, at, worst_ratio))


def main():
    torch.set_num_threads(1)  # reproducible reductions
    sizes = []

    # ---- main tiny fixture ("add")
    cfg_dict = tiny_config_dict("add")
    cfg = bt.config_from_dict(cfg_dict)
    model = build_model(cfg)
    batch = make_batch(cfg)
    tdir = os.path.join(FIX, "tiny")
    weights = write_model_dir(tdir, cfg_dict, model, metadata(cfg_dict))

    ref = reference_model(model)
    out = run(ref, batch)
    io = dict(batch)
    io.update(forward_tensors(cfg, out, batch))
    for name in ("itc", "itm", "mlm"):
        for k, g in loss_grads(ref, out["loss_" + name]).items():
            io["grad_%s.%s" % (name, k)] = g
    del out
    io = to_f32(io)
    fp32_diagnostic("tiny", model, batch, io, ("itc", "itm", "mlm"))
    losses, norms, final = adamw_run(ref, batch)
    io["adamw.loss"] = torch.tensor(losses, dtype=torch.float32)
    io["adamw.grad_norm"] = torch.tensor(norms, dtype=torch.float32)
    io.update(to_f32(final))
    hyper = {"lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WD, "clip_grad_norm": CLIP,
             "steps": STEPS}
    io_meta = metadata(cfg_dict, {
        "adamw": json.dumps(hyper),
        "adamw_no_decay_rule": NO_DECAY_RULE,
        "adamw_loss": "loss_itc + loss_itm + loss_mlm on the same batch every step; adamw.loss[i] = loss "
                      "at the forward before step i+1 (adamw.loss[5] = after the 5th step)",
        "adamw_update": "torch.optim.AdamW (torch 1.13), run in float64 from the F32 weights: "
                        "p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; "
                        "p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)",
        "clip": "g *= min(1, 1.0/(norm + 1e-6)) with norm = global L2 norm over all parameter grads "
                "(torch.nn.utils.clip_grad_norm_); adamw.grad_norm holds the pre-clip norm",
        "zero_grad_params": "parameters with no gradient (text_model.pooler.*) take part with an "
                            "explicit zero gradient, so weight decay still applies to them"})
    io_path = os.path.join(FIX, "tiny_io.safetensors")
    st.save_file(io, io_path, io_meta)
    verify_roundtrip(cfg, os.path.join(tdir, "model.safetensors"), io_path)
    sizes += [os.path.join(tdir, "model.safetensors"), io_path]
    print("tiny: %d parameter tensors, %d parameters; loss_itc %.6f loss_itm %.6f loss_mlm %.6f"
          % (len(weights), sum(v.numel() for v in weights.values()), io["loss_itc"], io["loss_itm"],
             io["loss_mlm"]))
    print("adamw.loss", ["%.6f" % x for x in losses])
    print("adamw.grad_norm", ["%.6f" % x for x in norms])

    os.makedirs(os.path.join(ROOT, "configs", "tiny"), exist_ok=True)
    write_json(os.path.join(ROOT, "configs", "tiny", "config.json"), cfg_dict)
    write_json(os.path.join(ROOT, "configs", "tiny", "preprocessor_config.json"), tiny_preprocessor_dict())

    # ---- link-tower variants
    for kind in ("scaled_add", "interpolate"):
        vdict = tiny_config_dict(kind)
        vcfg = bt.config_from_dict(vdict)
        vmodel = build_model(vcfg)
        vdir = os.path.join(FIX, "tiny_" + kind)
        write_model_dir(vdir, vdict, vmodel, metadata(vdict))
        vref = reference_model(vmodel)
        vout = run(vref, batch)
        vio = dict(batch)
        vio.update(forward_tensors(vcfg, vout, batch))
        for k, g in loss_grads(vref, vout["loss_itm"]).items():
            vio["grad_itm." + k] = g
        vio = to_f32(vio)
        fp32_diagnostic(kind, vmodel, batch, vio, ("itm",))
        vpath = os.path.join(FIX, "tiny_%s_io.safetensors" % kind)
        st.save_file(vio, vpath, metadata(vdict))
        verify_roundtrip(vcfg, os.path.join(vdir, "model.safetensors"), vpath)
        sizes += [os.path.join(vdir, "model.safetensors"), vpath]
        scal = {k: round(float(v), 6) for k, v in vmodel.state_dict().items() if v.dim() == 0 and "link_tower" in k}
        print("%s: loss_itm %.6f, scalars %s" % (kind, vio["loss_itm"], scal))

    total = 0
    for p in sizes:
        total += size_of(p)
        print("%9d  %s" % (size_of(p), os.path.relpath(p, ROOT)))
    print("%9d  total (safetensors files)" % total)


if __name__ == "__main__":
    main()
