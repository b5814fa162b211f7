"""gen_train_fixtures.py: writes the training fixtures the C loss and step tests compare against.

Run:  /usr/bin/python3 scripts/gen_train_fixtures.py [losses|step|all]   (a few seconds, 1 thread)

Writes (tests/fixtures/train/):
  losses.safetensors   the loss terms of src/train/loss.h on fixed inputs, their values and the
                       gradients of each w.r.t. its inputs (test_loss.c):
                         itc.*        HF's contrastive loss (three one-directional CEs / 3,
                                      exp(logit_scale), arange targets), B = 6, C = 8
                         itc_dup.*    the same with duplicate-aware soft targets (pairs sharing an
                                      image key or a caption key are positives of each other,
                                      uniform target mass over a row's positives)
                         itc_local.*  the share of rows [2, 5) of the itc_dup problem (the MPI
                                      local-loss shape: Σ of those rows' CEs / (3 N))
                         itm.*        CE over P = 9 pairs, labels [1]*3 + [0]*6, weight 0.7
                         mlm.*        CE over 24 positions of V = 50 logits, 7 labels, rest -100
  step.safetensors     whole-step parity: N optimizer steps of the tiny model (tests/fixtures/tiny)
                       with ITC + ITM (fixed negatives) + MLM (fixed masks), gradient accumulation
                       2, torch.optim.AdamW with parameter groups (lr multipliers, no-decay),
                       clip_grad_norm_, HF's linear schedule with warmup (test_step_parity.c)

Everything is computed in float64 (inputs are F32 values upcast exactly) and rounded to F32 once
when stored. The loss functions below are written from the HF / torch definitions (docs/spec.md
§4), independently of the C code; itc_hf is checked here against the twin's own ITC loss
on the model fixture (tests/fixtures/tiny_io.safetensors), so the two definitions cannot drift.

Deliberately not here: the C engine's random streams (the sampler and masker are tested for their
distributions in C; this script gives them fixed negatives and masks), dropout (eval mode).
"""

import json
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bt_reference as bt          # noqa: E402
import safetensors_io as st        # noqa: E402

ROOT = os.path.dirname(HERE)
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "train")
F64 = torch.float64
SEED_LOSSES = 777


# ----------------------------------------------------------------------------------------------
# Loss definitions (the twin of src/train/loss.h)

def itc_hf(te, ie, ce, logit_scale):
    """HF BridgeTowerForContrastiveLearning (4.27): three one-directional CEs with arange targets."""
    s = logit_scale.exp()
    y = torch.arange(te.shape[0])
    return (F.cross_entropy(te @ ie.t() * s, y) + F.cross_entropy(te @ ce.t() * s, y)
            + F.cross_entropy(ie @ ce.t() * s, y)) / 3.0


def positive_targets(image_key, caption_key):
    """(N, N) soft targets: row r uniform over the pairs j sharing r's image key or caption key."""
    n = len(image_key)
    y = torch.zeros(n, n, dtype=F64)
    for r in range(n):
        pos = [j for j in range(n) if j == r or image_key[j] == image_key[r] or caption_key[j] == caption_key[r]]
        for j in pos:
            y[r, j] = 1.0 / len(pos)
    return y


def itc_rows(te, ie, ce, logit_scale, y, rows, n_total):
    """Σ over `rows` of the three soft-target row CEs, / (3 n_total)."""
    s = logit_scale.exp()
    total = 0.0
    for a, b in ((te, ie), (te, ce), (ie, ce)):
        logp = F.log_softmax(a[rows] @ b.t() * s, dim=-1)
        total = total + (-(y[rows] * logp).sum())
    return total / (3.0 * n_total)


def itm_loss(logits, labels):
    return F.cross_entropy(logits, labels)


def mlm_loss(logits, labels):
    return F.cross_entropy(logits, labels, ignore_index=-100)


# ----------------------------------------------------------------------------------------------

def f32_leaf(t):
    """An F32-representable float64 leaf (what the C test reads back exactly)."""
    return t.to(torch.float32).to(F64).requires_grad_(True)


def normalized(g, n, c):
    return F.normalize(torch.randn(n, c, generator=g, dtype=F64), dim=-1)


def check_itc_against_twin():
    """itc_hf on the model fixture's stored embeddings reproduces the twin's stored loss_itc."""
    io = st.load_file(os.path.join(FIX, "tiny_io.safetensors"))
    w = st.load_file(os.path.join(FIX, "tiny", "model.safetensors"))
    got = itc_hf(io["itc_text_embeds"].double(), io["itc_image_embeds"].double(),
                 io["itc_cross_embeds"].double(), w["logit_scale"].double())
    want = io["loss_itc"].double()
    if abs(got.item() - want.item()) > 1e-6 * abs(want.item()):
        raise SystemExit("itc_hf %.9f != twin loss_itc %.9f" % (got.item(), want.item()))
    print("itc_hf matches the twin's loss_itc on tiny_io (%.7f)" % got.item())


def gen_losses():
    check_itc_against_twin()
    g = torch.Generator().manual_seed(SEED_LOSSES)
    t = {}
    meta = {"generator": "scripts/gen_train_fixtures.py losses", "torch_version": torch.__version__,
            "seed": str(SEED_LOSSES)}

    # ITC, HF arange targets. Embeddings are correlated with their pair (te ~ ie ~ ce) so the
    # softmax rows are far from uniform, and logit_scale 2.7 (s ~ 14.9) as in the checkpoints.
    B, C = 6, 8
    base = torch.randn(B, C, generator=g, dtype=F64)
    te = f32_leaf(F.normalize(base + 0.8 * torch.randn(B, C, generator=g, dtype=F64), dim=-1))
    ie = f32_leaf(F.normalize(base + 0.8 * torch.randn(B, C, generator=g, dtype=F64), dim=-1))
    ce = f32_leaf(F.normalize(base + 0.8 * torch.randn(B, C, generator=g, dtype=F64), dim=-1))
    ls = f32_leaf(torch.tensor(2.7))
    loss = itc_hf(te, ie, ce, ls)
    gte, gie, gce, gls = torch.autograd.grad(loss, (te, ie, ce, ls))
    t.update({"itc.text": te, "itc.image": ie, "itc.cross": ce, "itc.logit_scale": ls.reshape(1),
              "itc.loss": loss.reshape(1), "itc.d_text": gte, "itc.d_image": gie, "itc.d_cross": gce,
              "itc.d_logit_scale": gls.reshape(1)})
    # the same loss written as soft targets with all keys distinct must agree (sanity)
    y_plain = positive_targets(list(range(B)), list(range(100, 100 + B)))
    alt = itc_rows(te, ie, ce, ls, y_plain, list(range(B)), B)
    assert abs(alt.item() - loss.item()) < 1e-12, (alt.item(), loss.item())

    # duplicate-aware: pairs 1, 2 share an image; pairs 3, 4 share a caption; pair 5 shares
    # pair 0's image (so rows 0 and 5 have two positives each)
    image_key = [7, 8, 8, 9, 10, 7]
    caption_key = [20, 21, 22, 23, 23, 24]
    y = positive_targets(image_key, caption_key)
    loss = itc_rows(te, ie, ce, ls, y, list(range(B)), B)
    gte, gie, gce, gls = torch.autograd.grad(loss, (te, ie, ce, ls))
    t.update({"itc_dup.image_key": torch.tensor(image_key), "itc_dup.caption_key": torch.tensor(caption_key),
              "itc_dup.loss": loss.reshape(1), "itc_dup.d_text": gte, "itc_dup.d_image": gie,
              "itc_dup.d_cross": gce, "itc_dup.d_logit_scale": gls.reshape(1)})

    # local rows [2, 5) of the duplicate-aware problem
    rows = [2, 3, 4]
    loss = itc_rows(te, ie, ce, ls, y, rows, B)
    gte, gie, gce, gls = torch.autograd.grad(loss, (te, ie, ce, ls))
    t.update({"itc_local.loss": loss.reshape(1), "itc_local.d_text": gte, "itc_local.d_image": gie,
              "itc_local.d_cross": gce, "itc_local.d_logit_scale": gls.reshape(1)})

    # ITM: 3 positives, 6 negatives; the loss is weighted by 0.7 in the C call
    P = 9
    logits = f32_leaf(2.0 * torch.randn(P, 2, generator=g, dtype=F64))
    labels = torch.tensor([1] * 3 + [0] * 6)
    w_itm = 0.7
    loss = itm_loss(logits, labels)
    (gl,) = torch.autograd.grad(w_itm * loss, (logits,))
    t.update({"itm.logits": logits, "itm.labels": labels, "itm.loss": loss.reshape(1),
              "itm.d_logits": gl})

    # MLM: 24 positions, V = 50, 7 labelled (weight 1.3)
    n, V = 24, 50
    logits = f32_leaf(3.0 * torch.randn(n, V, generator=g, dtype=F64))
    labels = torch.full((n,), -100, dtype=torch.long)
    for i, pos in enumerate([0, 3, 4, 9, 15, 16, 23]):
        labels[pos] = (7 * i + 5) % V
    w_mlm = 1.3
    loss = mlm_loss(logits, labels)
    (gl,) = torch.autograd.grad(w_mlm * loss, (logits,))
    t.update({"mlm.logits": logits, "mlm.labels": labels, "mlm.loss": loss.reshape(1),
              "mlm.d_logits": gl})
    meta["weights"] = json.dumps({"itm": w_itm, "mlm": w_mlm})

    out = {k: (v.detach().to(torch.float32) if v.is_floating_point() else v.detach()) for k, v in t.items()}
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "losses.safetensors")
    st.save_file(out, path, meta)
    print("wrote %s (%d bytes): itc %.6f itc_dup %.6f itc_local %.6f itm %.6f mlm %.6f"
          % (os.path.relpath(path, ROOT), os.path.getsize(path), out["itc.loss"], out["itc_dup.loss"],
             out["itc_local.loss"], out["itm.loss"], out["mlm.loss"]))


# ----------------------------------------------------------------------------------------------
# Whole-step parity (tests/test_step_parity.c)

STEP = dict(steps=5, accum=2, micro_B=3, T=12, lr=5e-4, betas=(0.9, 0.98), eps=1e-6, wd=0.01, clip=1.0,
            warmup=2, lr_mult_cross=5.0, lr_mult_heads=5.0, w_itc=1.0, w_itm=0.7, w_mlm=0.5)
SEED_STEP = 31337
MASK_ID = 98   # the tiny vocabulary's last id stands in for <mask> (as in gen_model_fixtures.py)


def no_decay(key):
    """The HF Trainer rule as the parameter table states it (see gen_model_fixtures.py)."""
    return key.endswith("bias") or any(s in key for s in ("LayerNorm", "layernorm", "ln_", "norm"))


def lr_mult(key):
    """Original recipe: heads x lr_mult_heads, other keys containing "cross_modal" x lr_mult_cross."""
    if not key.startswith("bridgetower."):
        return STEP["lr_mult_heads"]
    return STEP["lr_mult_cross"] if "cross_modal" in key else 1.0


def hf_linear_lambda(step, warmup, total):
    """transformers get_linear_schedule_with_warmup's lr_lambda."""
    if step < warmup:
        return float(step) / float(max(1, warmup))
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


def make_micro(cfg, g):
    """One micro-batch: B captions of random lengths (bos ... eos, pads), pixels, fixed negatives
    (any other row), fixed MLM masks (~30% of the real tokens, mask / random / keep)."""
    B, T, V = STEP["micro_B"], STEP["T"], cfg.text.vocab_size
    pad, bos, eos = cfg.text.pad_token_id, cfg.text.bos_token_id, cfg.text.eos_token_id
    ids = torch.full((B, T), pad, dtype=torch.long)
    for b in range(B):
        n = int(torch.randint(5, T + 1, (1,), generator=g))
        ids[b, 0] = bos
        ids[b, 1:n - 1] = torch.randint(3, MASK_ID, (n - 2,), generator=g)
        ids[b, n - 1] = eos
    mask = (ids != pad).long()
    mlm_ids = ids.clone()
    labels = torch.full((B, T), -100, dtype=torch.long)
    for b in range(B):
        for t in range(T):
            if ids[b, t] in (pad, bos, eos) or float(torch.rand(1, generator=g)) >= 0.3:
                continue
            labels[b, t] = ids[b, t]
            u = float(torch.rand(1, generator=g))
            if u < 0.8:
                mlm_ids[b, t] = MASK_ID
            elif u < 0.9:
                mlm_ids[b, t] = int(torch.randint(0, V, (1,), generator=g))
    if (labels != -100).sum() == 0:   # at least one target
        labels[0, 1] = ids[0, 1]
        mlm_ids[0, 1] = MASK_ID
    neg_image = torch.tensor([(b + 1 + int(torch.randint(0, B - 1, (1,), generator=g))) % B for b in range(B)])
    neg_text = torch.tensor([(b + 1 + int(torch.randint(0, B - 1, (1,), generator=g))) % B for b in range(B)])
    pixels = torch.randn(B, 3, cfg.vision.image_size, cfg.vision.image_size, generator=g)
    return dict(input_ids=ids, attention_mask=mask, pixel_values=pixels, mlm_input_ids=mlm_ids,
                mlm_labels=labels, neg_image=neg_image, neg_text=neg_text)


def micro_losses(model, mb):
    """The three terms of one micro-batch, as the C step computes them from its phases:
    ITC on the positives, ITM on [positives, (b, neg_image[b]), (neg_text[b], b)] with labels
    1, 0, 0, MLM on the masked captions paired with their images."""
    ids, am, pix = mb["input_ids"], mb["attention_mask"], mb["pixel_values"].to(F64)
    ni, nt = mb["neg_image"], mb["neg_text"]
    pos = model(ids, am, pix, itc_loss=False)
    itc = itc_hf(pos["itc_text_embeds"], pos["itc_image_embeds"], pos["itc_cross_embeds"], model.logit_scale)
    B = ids.shape[0]
    all_ids = torch.cat([ids, ids, ids[nt]])
    all_am = torch.cat([am, am, am[nt]])
    all_pix = torch.cat([pix, pix[ni], pix])
    itm_logits = model(all_ids, all_am, all_pix, itc_loss=False)["itm_logits"]
    itm = itm_loss(itm_logits, torch.tensor([1] * B + [0] * (2 * B)))
    mout = model(mb["mlm_input_ids"], am, pix, itc_loss=False)
    V = mout["mlm_logits"].shape[-1]
    mlm = mlm_loss(mout["mlm_logits"].reshape(-1, V), mb["mlm_labels"].reshape(-1))
    return itc, itm, mlm


def gen_step():
    cfg = bt.load_config(os.path.join(FIX, "tiny"))
    model = bt.BridgeTowerTwin(cfg, heads=bt.HEADS_ALL)
    bt.load_weights(model, st.load_file(os.path.join(FIX, "tiny", "model.safetensors")))
    model = model.to(F64).eval()
    g = torch.Generator().manual_seed(SEED_STEP)
    n_micro = STEP["steps"] * STEP["accum"]
    micros = [make_micro(cfg, g) for _ in range(n_micro)]

    named = list(model.named_parameters())
    groups = {}
    for k, p in named:
        key = (lr_mult(k), not no_decay(k))
        groups.setdefault(key, []).append(p)
    param_groups = [{"params": ps, "lr": STEP["lr"] * mult, "weight_decay": STEP["wd"] if dec else 0.0}
                    for (mult, dec), ps in sorted(groups.items())]
    opt = torch.optim.AdamW(param_groups, lr=STEP["lr"], betas=STEP["betas"], eps=STEP["eps"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: hf_linear_lambda(s, STEP["warmup"], STEP["steps"]))
    params = [p for _, p in named]
    w = (STEP["w_itc"], STEP["w_itm"], STEP["w_mlm"])
    rec = {k: [] for k in ("loss", "loss_itc", "loss_itm", "loss_mlm", "grad_norm", "lr")}
    for step in range(STEP["steps"]):
        opt.zero_grad(set_to_none=True)
        terms = [0.0, 0.0, 0.0]
        # the lr torch's LambdaLR gave the multiplier-1 groups for this update
        rec["lr"].append(next(g["lr"] for g, ((mult, _), _) in zip(opt.param_groups, sorted(groups.items()))
                              if mult == 1.0))
        for k in range(STEP["accum"]):
            itc, itm, mlm = micro_losses(model, micros[step * STEP["accum"] + k])
            total = w[0] * itc + w[1] * itm + w[2] * mlm
            (total / STEP["accum"]).backward()   # HF Trainer: loss / gradient_accumulation_steps
            for i, x in enumerate((itc, itm, mlm)):
                terms[i] += x.item() / STEP["accum"]
        for p in params:   # parameters without a gradient (text pooler) still decay, as in C
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        rec["grad_norm"].append(float(torch.nn.utils.clip_grad_norm_(params, STEP["clip"])))
        rec["loss_itc"].append(terms[0])
        rec["loss_itm"].append(terms[1])
        rec["loss_mlm"].append(terms[2])
        rec["loss"].append(w[0] * terms[0] + w[1] * terms[1] + w[2] * terms[2])
        opt.step()
        sched.step()
    out = {}
    for i, mb in enumerate(micros):
        for k, v in mb.items():
            out["micro.%d.%s" % (i, k)] = v.to(torch.float32) if v.is_floating_point() else v
    for k, v in rec.items():
        out["step." + k] = torch.tensor(v, dtype=torch.float32)
    for k, p in named:
        out["final." + k] = p.detach().to(torch.float32)
    meta = {"generator": "scripts/gen_train_fixtures.py step (twin: scripts/bt_reference.py)",
            "torch_version": torch.__version__, "seed": str(SEED_STEP),
            "step": json.dumps(STEP),
            "recipe": "per step: zero grads; per micro-batch: (w_itc*ITC + w_itm*ITM + w_mlm*MLM) / accum "
                      "backward (ITC HF on the positives, ITM on positives + fixed negatives, MLM on the "
                      "fixed masks); zero grads for unused parameters; clip_grad_norm_(all, clip); "
                      "torch.optim.AdamW with one group per (lr multiplier, decay); LambdaLR with HF's "
                      "linear warmup lambda; float64 from the F32 weights, stored rounded to F32",
            "lr_mult_rule": "head keys (no bridgetower. prefix) x lr_mult_heads; other keys containing "
                            "cross_modal x lr_mult_cross; else 1",
            "no_decay_rule": "key ends with bias or contains LayerNorm, layernorm, ln_, norm"}
    path = os.path.join(OUT, "step.safetensors")
    st.save_file(out, path, meta)
    print("wrote %s (%d bytes)" % (os.path.relpath(path, ROOT), os.path.getsize(path)))
    for k in ("loss", "loss_itc", "loss_itm", "loss_mlm", "grad_norm", "lr"):
        print("  %-9s %s" % (k, " ".join("%.6g" % x for x in rec[k])))


def main(argv):
    torch.set_num_threads(1)
    what = argv[1] if len(argv) > 1 else "all"
    if what in ("losses", "all"):
        gen_losses()
    if what in ("step", "all"):
        gen_step()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
