"""gen_model_fixtures.py: writes the whole-model fixtures the C model tests compare against.

Run:  /usr/bin/python3 scripts/gen_model_fixtures.py        (from anywhere; a few seconds, 1 thread)

Writes (contract: notes/fixtures_spec.md; contents described in docs/model-parity.md):
  tests/fixtures/tiny/                 HF model dir: config.json, preprocessor_config.json, model.safetensors
  tests/fixtures/tiny_io.safetensors   batch, forward outputs and intermediates, per-loss gradients,
                                       a 5-step AdamW run
  tests/fixtures/tiny_scaled_add/ + tiny_scaled_add_io.safetensors      link_tower_type "scaled_add"
  tests/fixtures/tiny_interpolate/ + tiny_interpolate_io.safetensors    link_tower_type "interpolate"
                                       (variants: forward outputs and grad_itm.* only)
  configs/tiny/config.json, preprocessor_config.json                    copies, for users

Everything comes from scripts/bt_reference.py (the PyTorch twin, checked against transformers 4.27.1)
in fp32, eval mode (dropout off) with gradients enabled, from fixed seeds. The weights are drawn by
HF's init rules, then biases, LayerNorm parameters, logit_scale and the link-tower scalars are
perturbed so that no parameter sits at 0, 1 or its init value where a bug could hide.

Deliberately not here: the real checkpoints (too big to commit), dropout (random streams cannot be
matched by a C engine), bf16.
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


def build_model(cfg):
    torch.manual_seed(0)  # module construction draws; everything is overwritten below
    model = bt.BridgeTowerTwin(cfg, heads=bt.HEADS_ALL)
    bt.hf_init_(model, torch.Generator().manual_seed(SEED_WEIGHTS))
    perturb_(model)
    model.eval()  # dropout off; gradients stay enabled
    return model


def run(model, batch):
    return model(batch["input_ids"], batch["attention_mask"], batch["pixel_values"],
                 itm_labels=batch["itm_labels"], mlm_labels=batch["mlm_labels"])


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
    global clip-norm 1.0 before each step. Parameters that receive no gradient (the unused
    text_model.pooler) get an explicit zero gradient, so AdamW still applies weight decay to them
    (torch would skip a parameter whose .grad is None)."""
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
         "mode": "fp32, eval mode (dropout off), gradients enabled",
         "loss_itc": "HF: (CE(s*T@I^T) + CE(s*T@C^T) + CE(s*I@C^T))/3, s = exp(logit_scale), targets arange(B)",
         "loss_itm": "mean CE(itm_logits, itm_labels)",
         "loss_mlm": "mean CE over positions with mlm_labels != -100"}
    if extra:
        m.update(extra)
    return m


def verify_roundtrip(cfg, model_path, io_path):
    """Reloads the written files into a fresh twin and checks the forward outputs bit for bit."""
    fresh = bt.BridgeTowerTwin(cfg, heads=bt.HEADS_ALL)
    bt.load_weights(fresh, st.load_file(model_path))
    fresh.eval()
    io = st.load_file(io_path)
    batch = {k: io[k] for k in ("input_ids", "attention_mask", "pixel_values", "itm_labels", "mlm_labels")}
    out = forward_tensors(cfg, run(fresh, batch), batch)
    for k, v in out.items():
        if not torch.equal(v, io[k]):
            raise SystemExit("round trip mismatch in %s (%s)" % (k, io_path))


def size_of(path):
    return os.path.getsize(path)


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

    out = run(model, batch)
    io = dict(batch)
    io.update(forward_tensors(cfg, out, batch))
    for name in ("itc", "itm", "mlm"):
        for k, g in loss_grads(model, out["loss_" + name]).items():
            io["grad_%s.%s" % (name, k)] = g
    del out
    losses, norms, final = adamw_run(model, batch)
    io["adamw.loss"] = torch.tensor(losses, dtype=torch.float32)
    io["adamw.grad_norm"] = torch.tensor(norms, dtype=torch.float32)
    io.update(final)
    hyper = {"lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WD, "clip_grad_norm": CLIP,
             "steps": STEPS}
    io_meta = metadata(cfg_dict, {
        "adamw": json.dumps(hyper),
        "adamw_no_decay_rule": NO_DECAY_RULE,
        "adamw_loss": "loss_itc + loss_itm + loss_mlm on the same batch every step; adamw.loss[i] = loss "
                      "at the forward before step i+1 (adamw.loss[5] = after the 5th step)",
        "adamw_update": "torch.optim.AdamW (torch 1.13): p *= 1 - lr*wd; m = b1 m + (1-b1) g; "
                        "v = b2 v + (1-b2) g^2; p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)",
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
        vout = run(vmodel, batch)
        vio = dict(batch)
        vio.update(forward_tensors(vcfg, vout, batch))
        for k, g in loss_grads(vmodel, vout["loss_itm"]).items():
            vio["grad_itm." + k] = g
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
