#!/usr/bin/python3
"""check_synthetic_learnable.py: shows that the synthetic captioned-shapes data set (bt-data synth)
is rich enough that a small BridgeTower measurably learns retrieval on it, before bt's own
trainer exists.

What it does: builds the PyTorch twin (scripts/bt_reference.py) with the small config
configs/synthetic-model/config.json, draws its weights by HF's init rules from a seed, and
measures on the validation split, with the ITC embeddings (itc_text_embeds vs itc_image_embeds,
cosine similarity):
  - text->image and image->text recall@1 / @5 over the whole split;
  - 5-way caption-choice accuracy (record's caption_choices, pick the highest ITC score).
Then it trains on the train split with AdamW on HF's ITC loss (the three one-directional CEs / 3,
as BridgeTowerForContrastiveLearning computes it) and measures again. It prints a table with
the before / after numbers and chance level.

Inputs are prepared as bt's loader does, in plain Python: images with PIL (resize shortest
edge to 64 with bicubic, centre crop 64, rescale 1/255, CLIP mean/std from
configs/synthetic/preprocessor_config.json); captions with the independent BPE encoder in
scripts/bpe_reference.py over configs/synthetic/tokenizer.json, template <s> A </s>, padded to 32.

Deliberately not here: ITM / MLM training, learning-rate schedules, checkpoints, anything the
C trainer will do; bit-exact parity with bt's image resize (a 64 px image at 64 px is not
resized at all, so it does not matter here). This is a data check, not a model benchmark.

Usage:
  build-lead/src/data/bt-data synth --out /tmp/synth --train 512 --val 128 --test 128 --seed 0
  /usr/bin/python3 scripts/check_synthetic_learnable.py --data /tmp/synth [--epochs 16] [--lr 1e-3]
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bt_reference as btr  # noqa: E402
from bpe_reference import Reference  # noqa: E402

MAX_LEN = 32


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def preprocess_image(path, pp):
    """PIL image -> (3, S, S) float32, as the BridgeTower processor does for a square-ish image:
    shortest edge to S (bicubic), centre crop S, rescale, normalize."""
    s = pp["size"]["shortest_edge"]
    img = Image.open(path).convert("RGB")
    w, h = img.size
    if min(w, h) != s:
        scale = s / min(w, h)
        img = img.resize((max(s, round(w * scale)), max(s, round(h * scale))), Image.BICUBIC)
        w, h = img.size
    left, top = (w - s) // 2, (h - s) // 2
    img = img.crop((left, top, left + s, top + s))
    x = np.asarray(img, dtype=np.float32) * float(pp["rescale_factor"])  # (S, S, 3)
    x = (x - np.array(pp["image_mean"], dtype=np.float32)) / np.array(pp["image_std"], dtype=np.float32)
    return torch.from_numpy(x.transpose(2, 0, 1).copy())


def tokenize(tok, texts):
    """list of str -> input_ids, attention_mask (N, MAX_LEN) int64."""
    ids, masks = [], []
    for t in texts:
        i, m = tok.encode_template(t, max_length=MAX_LEN, truncate=True, pad=True)
        ids.append(i)
        masks.append(m)
    return torch.tensor(ids, dtype=torch.long), torch.tensor(masks, dtype=torch.long)


def load_split(data_dir, split, tok, pp):
    recs = read_jsonl(os.path.join(data_dir, split + ".jsonl"))
    pix = torch.stack([preprocess_image(os.path.join(data_dir, r["image"]), pp) for r in recs])
    ids, mask = tokenize(tok, [r["caption"] for r in recs])
    out = dict(pixel_values=pix, input_ids=ids, attention_mask=mask, records=recs)
    if recs and "caption_choices" in recs[0]:
        flat = [c for r in recs for c in r["caption_choices"]]
        cids, cmask = tokenize(tok, flat)
        k = len(recs[0]["caption_choices"])
        out["choice_ids"] = cids.view(len(recs), k, MAX_LEN)
        out["choice_mask"] = cmask.view(len(recs), k, MAX_LEN)
        out["labels"] = torch.tensor([r["label"] for r in recs], dtype=torch.long)
    return out


@torch.no_grad()
def embed(model, ids, mask, pix, bs=64):
    """ITC text and image embeddings (L2-normalized) from the twin's forward. The text embed
    depends only on the text and the image embed only on the image (both come from the
    uni-modal towers), so pairing rows arbitrarily is fine."""
    te, ie = [], []
    for i in range(0, ids.shape[0], bs):
        o = model(ids[i:i + bs], mask[i:i + bs], pix[i:i + bs], itc_loss=False)
        te.append(o["itc_text_embeds"])
        ie.append(o["itc_image_embeds"])
    return torch.cat(te), torch.cat(ie)


def recall_at(sim, k):
    """sim (N, N), row i's correct column is i -> fraction of rows whose target ranks < k."""
    target = sim.diagonal().unsqueeze(1)
    rank = (sim > target).sum(dim=1)  # ties count in the model's favour; random init has none
    return (rank < k).float().mean().item()


@torch.no_grad()
def evaluate(model, val, choices=True):
    model.eval()
    te, ie = embed(model, val["input_ids"], val["attention_mask"], val["pixel_values"])
    sim = te @ ie.t()  # (N texts, N images)
    if not choices:
        return {"t2i_r1": recall_at(sim, 1), "t2i_r5": recall_at(sim, 5)}
    n, k = val["choice_ids"].shape[:2]
    pix_rep = val["pixel_values"].repeat_interleave(k, dim=0)
    cte, cie = embed(model, val["choice_ids"].reshape(n * k, -1), val["choice_mask"].reshape(n * k, -1), pix_rep)
    scores = (cte * cie).sum(-1).view(n, k)  # each choice against its own record's image
    acc = (scores.argmax(dim=1) == val["labels"]).float().mean().item()
    return {"t2i_r1": recall_at(sim, 1), "t2i_r5": recall_at(sim, 5),
            "i2t_r1": recall_at(sim.t(), 1), "i2t_r5": recall_at(sim.t(), 5), "choice5": acc}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="directory written by bt-data synth")
    ap.add_argument("--config", default=os.path.join(ROOT, "configs/synthetic-model/config.json"))
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "configs/synthetic"))
    ap.add_argument("--epochs", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # dropout masks
    t0 = time.time()
    with open(os.path.join(args.tokenizer, "preprocessor_config.json")) as f:
        pp = json.load(f)
    tok = Reference.load(args.tokenizer)
    train = load_split(args.data, "train", tok, pp)
    val = load_split(args.data, "val", tok, pp)
    n_train, n_val = train["input_ids"].shape[0], val["input_ids"].shape[0]
    k = val["choice_ids"].shape[1]

    cfg = btr.load_config(args.config)
    model = btr.BridgeTowerTwin(cfg, heads=("itc",))
    btr.hf_init_(model, torch.Generator().manual_seed(args.seed))
    n_params = sum(p.numel() for p in model.parameters())
    print("data %s: %d train, %d val; model %s: %d parameters; loaded in %.1f s"
          % (args.data, n_train, n_val, args.config, n_params, time.time() - t0))

    before = evaluate(model, val)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    shuffle = torch.Generator().manual_seed(args.seed + 1)
    t_train = time.time()
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(n_train, generator=shuffle)
        total, steps = 0.0, 0
        # drop the last partial batch: a batch of 1 has a trivial contrastive loss
        for i in range(0, n_train - args.batch_size + 1, args.batch_size):
            b = perm[i:i + args.batch_size]
            out = model(train["input_ids"][b], train["attention_mask"][b], train["pixel_values"][b])
            loss = out["loss_itc"]
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
            steps += 1
        m = evaluate(model, val, choices=False)  # the cheap part only, to show progress
        print("epoch %d: train loss_itc %.4f  val t2i R@1 %.3f R@5 %.3f  (%.0f s)"
              % (epoch + 1, total / steps, m["t2i_r1"], m["t2i_r5"], time.time() - t_train), flush=True)
    after = evaluate(model, val)

    chance = {"t2i_r1": 1 / n_val, "t2i_r5": 5 / n_val, "i2t_r1": 1 / n_val, "i2t_r5": 5 / n_val,
              "choice5": 1 / k}
    names = [("t2i_r1", "text->image R@1"), ("t2i_r5", "text->image R@5"),
             ("i2t_r1", "image->text R@1"), ("i2t_r5", "image->text R@5"),
             ("choice5", "%d-way caption choice" % k)]
    print()
    print("val split, N = %d; %d epochs, AdamW lr %g, batch %d, seed %d, %d threads, %.0f s total"
          % (n_val, args.epochs, args.lr, args.batch_size, args.seed, args.threads, time.time() - t0))
    print("| metric | chance | before | after |")
    print("| --- | --- | --- | --- |")
    for key, label in names:
        print("| %s | %.1f%% | %.1f%% | %.1f%% |"
              % (label, 100 * chance[key], 100 * before[key], 100 * after[key]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
