"""bt_reference.py: a self-contained PyTorch twin of Hugging Face's BridgeTower (transformers 4.27).

What it is: plain torch (1.13) nn.Modules that compute what HF's BridgeTowerModel and its three
head classes (ForContrastiveLearning, ForImageAndTextRetrieval, ForMaskedLM) compute, written
from the specification in docs/spec.md, with module names chosen so that
state_dict() keys are exactly HF's keys: backbone under `bridgetower.`, heads bare
(itm_score.*, mlm_score.*, itc_*_head.*, logit_scale). It is the reference the C engine is
tested against (scripts/gen_model_fixtures.py writes the fixtures with it), and it was checked
against the real transformers code (docs/model-parity.md).

One forward computes the backbone once and all heads from it:
  - ITM: itm_score(pooler_output), CE with itm labels;
  - MLM: mlm_score(text_features), CE with ignore_index -100;
  - ITC: HF's three one-directional CEs (text->image, text->cross, image->cross) / 3 with
    exp(logit_scale), text = last uni-modal text CLS, image = ln_post + image transform +
    modality embedding 1 on the last uni-modal image CLS, cross = pooler_output.

Layout: everything batch-first. The vision tower runs on [B, Np, Hv] (HF runs it sequence-first;
the math per token is the same). Hidden sizes: Ht text, Hv vision, H cross (= Ht).

Deliberately not here: tokenizer and image preprocessing, the original Microsoft objectives
(hard-negative ITM, symmetric ITC), pruning, attention outputs, position-embedding interpolation,
share_cross_modal_transformer_layers=False / share_link_tower_layers=True (HF cannot run them
either), gradient checkpointing, and any import of `transformers`.
"""

import json
import math
import os
import sys
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

# ----------------------------------------------------------------------------------------------
# Configuration (HF config.json field names; defaults are HF's class defaults, docs/spec.md §1.1)

TEXT_DEFAULTS = dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                     attention_probs_dropout_prob=0.1, max_position_embeddings=514, type_vocab_size=1,
                     layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                     initializer_factor=1)
VISION_DEFAULTS = dict(hidden_size=768, num_hidden_layers=12, num_channels=3, patch_size=16,
                       image_size=288, initializer_factor=1, layer_norm_eps=1e-5, stop_gradient=False,
                       share_layernorm=True, remove_last_layer=False)
TOP_DEFAULTS = dict(share_cross_modal_transformer_layers=True, hidden_act="gelu", hidden_size=768,
                    initializer_factor=1, layer_norm_eps=1e-5, share_link_tower_layers=False,
                    link_tower_type="add", num_attention_heads=12, num_hidden_layers=6,
                    tie_word_embeddings=False, init_layernorm_from_vision_encoder=False,
                    contrastive_hidden_size=None, logit_scale_init_value=2.6592)


def config_from_dict(d):
    """HF config.json dict -> namespace with .text and .vision; unknown keys are ignored (HF keeps
    them as attributes but never reads them). Raises ValueError for settings HF cannot run."""
    top = dict(TOP_DEFAULTS)
    top.update({k: v for k, v in d.items() if k in TOP_DEFAULTS})
    text = dict(TEXT_DEFAULTS)
    text.update({k: v for k, v in (d.get("text_config") or {}).items() if k in TEXT_DEFAULTS})
    vision = dict(VISION_DEFAULTS)
    vision.update({k: v for k, v in (d.get("vision_config") or {}).items() if k in VISION_DEFAULTS})
    cfg = SimpleNamespace(**top)
    cfg.text = SimpleNamespace(**text)
    cfg.vision = SimpleNamespace(**vision)
    if not cfg.share_cross_modal_transformer_layers or cfg.share_link_tower_layers:
        raise ValueError("only share_cross_modal_transformer_layers=true, share_link_tower_layers=false run in HF")
    if cfg.tie_word_embeddings:
        raise ValueError("tie_word_embeddings=true is not supported (false in every checkpoint)")
    if cfg.link_tower_type not in ("add", "scaled_add", "interpolate"):
        raise ValueError("link_tower_type %r" % cfg.link_tower_type)
    if cfg.hidden_size != cfg.text.hidden_size:
        raise ValueError("cross layers are built from text_config: hidden_size must equal text hidden_size")
    if cfg.vision.num_hidden_layers != cfg.text.num_hidden_layers or cfg.vision.remove_last_layer:
        raise ValueError("HF indexes vision block i with text layer i: equal depths, remove_last_layer=false")
    if cfg.num_hidden_layers > cfg.text.num_hidden_layers:
        raise ValueError("more cross layers than text layers")
    if cfg.text.hidden_act != "gelu" or cfg.hidden_act != "gelu":
        raise ValueError("only hidden_act 'gelu' (exact erf GELU) is implemented")
    if cfg.vision.hidden_size % 64 != 0:
        raise ValueError("vision hidden_size must be a multiple of 64 (heads = hidden/64)")
    return cfg


def load_config(path):
    """path: a config.json file or a model directory holding one."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path) as f:
        return config_from_dict(json.load(f))


# ----------------------------------------------------------------------------------------------
# Masks and small helpers

def extended_mask(attention_mask, dtype=torch.float32):
    """[B, T] 1/0 -> additive [B, 1, 1, T]: 0 where kept, the most negative finite value of dtype
    where padded (HF 4.27 uses finfo.min; older releases -10000; same result unless a row is
    fully masked)."""
    m = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - m) * torch.finfo(dtype).min


def position_ids_from_input_ids(input_ids, padding_idx):
    """RoBERTa positions: real tokens get padding_idx+1, padding_idx+2, ... (counting only
    non-pad tokens), pads get padding_idx. Computed from the ids, not from attention_mask."""
    m = input_ids.ne(padding_idx).long()
    return torch.cumsum(m, dim=1) * m + padding_idx


class QuickGELU(nn.Module):
    """CLIP's activation x * sigmoid(1.702 x); used only in the vision MLP."""

    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


# ----------------------------------------------------------------------------------------------
# BERT/RoBERTa-style blocks (text tower and cross-modal layers), post-LN

class BertSelfAttention(nn.Module):
    """Multi-head attention with separate query/key/value Linears; heads are contiguous
    head_dim-wide column blocks. K/V come from `context` when given (cross-attention)."""

    def __init__(self, hidden, heads, p_drop, device=None):
        super().__init__()
        assert hidden % heads == 0
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden, device=device)
        self.key = nn.Linear(hidden, hidden, device=device)
        self.value = nn.Linear(hidden, hidden, device=device)
        self.dropout = nn.Dropout(p_drop)

    def _split(self, x):  # (B, L, H) -> (B, nh, L, d)
        B, L, _ = x.shape
        return x.view(B, L, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, h, mask, context=None):
        # h (B, Lq, H); context (B, Lk, H) or None; mask additive (B, 1, 1, Lk) or None
        kv = h if context is None else context
        q = self._split(self.query(h))
        k = self._split(self.key(kv))
        v = self._split(self.value(kv))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)  # (B, nh, Lq, Lk)
        if mask is not None:
            scores = scores + mask
        probs = self.dropout(F.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v)                                              # (B, nh, Lq, d)
        B, nh, Lq, d = ctx.shape
        return ctx.permute(0, 2, 1, 3).reshape(B, Lq, nh * d)


class BertResidualOutput(nn.Module):
    """LayerNorm(dropout(dense(x)) + residual): `attention.output` and the FFN `output`."""

    def __init__(self, d_in, hidden, eps, p_drop, device=None):
        super().__init__()
        self.dense = nn.Linear(d_in, hidden, device=device)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps, device=device)
        self.dropout = nn.Dropout(p_drop)

    def forward(self, x, residual):
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, tc, device=None):
        super().__init__()
        self.self = BertSelfAttention(tc.hidden_size, tc.num_attention_heads,
                                      tc.attention_probs_dropout_prob, device)
        self.output = BertResidualOutput(tc.hidden_size, tc.hidden_size, tc.layer_norm_eps,
                                         tc.hidden_dropout_prob, device)

    def forward(self, h, mask, context=None):
        return self.output(self.self(h, mask, context), h)


class BertIntermediate(nn.Module):
    def __init__(self, tc, device=None):
        super().__init__()
        self.dense = nn.Linear(tc.hidden_size, tc.intermediate_size, device=device)

    def forward(self, x):
        return F.gelu(self.dense(x))  # exact erf GELU


class TextLayer(nn.Module):
    """Post-LN encoder layer: a = LN(attn(h) + h); out = LN(W2 gelu(W1 a) + a)."""

    def __init__(self, tc, device=None):
        super().__init__()
        self.attention = BertAttention(tc, device)
        self.intermediate = BertIntermediate(tc, device)
        self.output = BertResidualOutput(tc.intermediate_size, tc.hidden_size, tc.layer_norm_eps,
                                         tc.hidden_dropout_prob, device)

    def forward(self, h, mask):
        a = self.attention(h, mask)
        return self.output(self.intermediate(a), a)


class CrossLayer(nn.Module):
    """BridgeTower cross-modal layer (built from text_config): self-attention on h, then
    cross-attention with queries from that result and keys/values from `other`, then the FFN."""

    def __init__(self, tc, device=None):
        super().__init__()
        self.attention = BertAttention(tc, device)
        self.crossattention = BertAttention(tc, device)
        self.intermediate = BertIntermediate(tc, device)
        self.output = BertResidualOutput(tc.intermediate_size, tc.hidden_size, tc.layer_norm_eps,
                                         tc.hidden_dropout_prob, device)

    def forward(self, h, other, mask_self, mask_other):
        a = self.attention(h, mask_self)
        c = self.crossattention(a, mask_other, context=other)
        return self.output(self.intermediate(c), c)


class Pooler(nn.Module):
    """tanh(dense(x[:, 0]))"""

    def __init__(self, hidden, device=None):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden, device=device)

    def forward(self, x):
        return torch.tanh(self.dense(x[:, 0]))


class TextEmbeddings(nn.Module):
    def __init__(self, tc, device=None):
        super().__init__()
        pad = tc.pad_token_id
        # padding_idx: rows `pad` of both tables never receive a gradient (PyTorch semantics HF
        # inherits); they are not zeroed by HF's init.
        self.word_embeddings = nn.Embedding(tc.vocab_size, tc.hidden_size, padding_idx=pad, device=device)
        self.position_embeddings = nn.Embedding(tc.max_position_embeddings, tc.hidden_size,
                                                padding_idx=pad, device=device)
        self.token_type_embeddings = nn.Embedding(tc.type_vocab_size, tc.hidden_size, device=device)
        self.LayerNorm = nn.LayerNorm(tc.hidden_size, eps=tc.layer_norm_eps, device=device)
        self.dropout = nn.Dropout(tc.hidden_dropout_prob)
        self.pad = pad

    def forward(self, input_ids):
        pos = position_ids_from_input_ids(input_ids, self.pad)
        # HF ignores token_type_ids: always type 0.
        e = (self.word_embeddings(input_ids) + self.token_type_embeddings.weight[0]
             + self.position_embeddings(pos))
        return self.dropout(self.LayerNorm(e))


class TextEncoder(nn.Module):
    def __init__(self, tc, device=None):
        super().__init__()
        self.layer = nn.ModuleList([TextLayer(tc, device) for _ in range(tc.num_hidden_layers)])


class TextModel(nn.Module):
    def __init__(self, tc, device=None):
        super().__init__()
        self.embeddings = TextEmbeddings(tc, device)
        self.encoder = TextEncoder(tc, device)
        self.pooler = Pooler(tc.hidden_size, device)  # in every checkpoint, never used by BridgeTower


# ----------------------------------------------------------------------------------------------
# CLIP ViT (vision tower), pre-LN

class VisionAttention(nn.Module):
    """nn.MultiheadAttention's parameter layout (in_proj_weight rows [Q; K; V], out_proj) with
    Hv/64 heads of width 64, no mask. Q is scaled by 1/sqrt(64) before Q K^T, as PyTorch does."""

    def __init__(self, hidden, device=None):
        super().__init__()
        self.heads = hidden // 64
        self.head_dim = 64
        self.in_proj_weight = nn.Parameter(torch.empty(3 * hidden, hidden, device=device))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * hidden, device=device))
        self.out_proj = nn.Linear(hidden, hidden, device=device)

    def forward(self, x):
        # x (B, N, Hv)
        B, N, Hv = x.shape
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)       # (B, N, 3Hv)
        q, k, v = qkv.chunk(3, dim=-1)
        q, k, v = [t.reshape(B, N, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v)]
        q = q / math.sqrt(self.head_dim)
        probs = F.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=-1)  # (B, nh, N, N)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(B, N, Hv)
        return self.out_proj(ctx)


class ResidualAttentionBlock(nn.Module):
    """x = x + attn(ln_1(x)); x = x + c_proj(quickgelu(c_fc(ln_2(x))))"""

    def __init__(self, vc, device=None):
        super().__init__()
        H = vc.hidden_size
        self.attn = VisionAttention(H, device)
        self.ln_1 = nn.LayerNorm(H, eps=vc.layer_norm_eps, device=device)
        self.mlp = nn.ModuleDict([("c_fc", nn.Linear(H, 4 * H, device=device)), ("gelu", QuickGELU()),
                                  ("c_proj", nn.Linear(4 * H, H, device=device))])
        self.ln_2 = nn.LayerNorm(H, eps=vc.layer_norm_eps, device=device)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp["c_proj"](self.mlp["gelu"](self.mlp["c_fc"](self.ln_2(x))))


class VisionEmbeddings(nn.Module):
    def __init__(self, vc, device=None):
        super().__init__()
        H, P = vc.hidden_size, vc.patch_size
        self.image_size, self.patch_size = vc.image_size, P
        self.num_positions = (vc.image_size // P) ** 2 + 1
        self.class_embedding = nn.Parameter(torch.empty(H, device=device))
        self.patch_embedding = nn.Conv2d(vc.num_channels, H, kernel_size=P, stride=P, bias=False, device=device)
        self.position_embedding = nn.Embedding(self.num_positions, H, device=device)

    def forward(self, pixel_values):
        # pixel_values (B, 3, R, R) -> (B, Np, Hv); patch p = gy * G + gx, pixels flattened (c, ky, kx)
        B, _, h, w = pixel_values.shape
        if h != self.image_size or w != self.image_size:
            raise ValueError("image %dx%d, model expects %dx%d" % (h, w, self.image_size, self.image_size))
        patches = self.patch_embedding(pixel_values).flatten(2).transpose(1, 2)   # (B, G*G, Hv)
        cls = self.class_embedding.expand(B, 1, -1)
        return torch.cat([cls, patches], dim=1) + self.position_embedding.weight[: self.num_positions]


class VisionBlocks(nn.Module):
    def __init__(self, vc, device=None):
        super().__init__()
        self.resblocks = nn.ModuleList([ResidualAttentionBlock(vc, device) for _ in range(vc.num_hidden_layers)])


class VisualTower(nn.Module):
    def __init__(self, vc, device=None):
        super().__init__()
        H = vc.hidden_size
        self.embeddings = VisionEmbeddings(vc, device)
        self.ln_pre = nn.LayerNorm(H, eps=vc.layer_norm_eps, device=device)
        self.transformer = VisionBlocks(vc, device)
        self.ln_post = nn.LayerNorm(H, eps=vc.layer_norm_eps, device=device)
        if not vc.share_layernorm:
            # present in the weights when share_layernorm=false, never used by BridgeTowerModel
            self.ln_separate = nn.ModuleList([nn.LayerNorm(H, eps=vc.layer_norm_eps, device=device)
                                              for _ in range(vc.num_hidden_layers)])


class VisionModel(nn.Module):
    def __init__(self, vc, device=None):
        super().__init__()
        self.visual = VisualTower(vc, device)


# ----------------------------------------------------------------------------------------------
# Bridge pieces and the backbone

class LinkTower(nn.Module):
    """add: LN(u + c); scaled_add: LN(u * scaled_factor + c); interpolate: LN(u (1-beta) + c beta).
    u = uni-modal input (already transformed + modality embedding), c = previous cross output."""

    def __init__(self, cfg, device=None):
        super().__init__()
        self.kind = cfg.link_tower_type
        if self.kind == "scaled_add":
            self.scaled_factor = nn.Parameter(torch.tensor(1.0, device=device))
        elif self.kind == "interpolate":
            self.beta = nn.Parameter(torch.tensor(0.5, device=device))
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, device=device)

    def forward(self, u, c):
        if self.kind == "add":
            return self.LayerNorm(u + c)
        if self.kind == "scaled_add":
            return self.LayerNorm(u * self.scaled_factor + c)
        return self.LayerNorm(u * (1 - self.beta) + c * self.beta)


class BridgeTowerBackbone(nn.Module):
    """HF's BridgeTowerModel. Submodules are registered in HF's order, so state_dict() lists
    keys in the order HF does."""

    def __init__(self, cfg, device=None):
        super().__init__()
        tc, vc, H, X = cfg.text, cfg.vision, cfg.hidden_size, cfg.num_hidden_layers
        self.cfg = cfg
        self.cross_modal_text_transform = nn.Linear(tc.hidden_size, H, device=device)
        self.cross_modal_image_transform = nn.Linear(vc.hidden_size, H, device=device)
        self.token_type_embeddings = nn.Embedding(2, H, device=device)  # row 0 text, row 1 image
        self.vision_model = VisionModel(vc, device)
        self.text_model = TextModel(tc, device)
        self.cross_modal_image_layers = nn.ModuleList([CrossLayer(tc, device) for _ in range(X)])
        self.cross_modal_text_layers = nn.ModuleList([CrossLayer(tc, device) for _ in range(X)])
        self.cross_modal_image_pooler = Pooler(H, device)
        self.cross_modal_text_pooler = Pooler(H, device)
        self.cross_modal_text_layernorm = nn.LayerNorm(H, eps=cfg.layer_norm_eps, device=device)
        self.cross_modal_image_layernorm = nn.LayerNorm(H, eps=cfg.layer_norm_eps, device=device)
        self.cross_modal_text_link_tower = nn.ModuleList([LinkTower(cfg, device) for _ in range(X - 1)])
        self.cross_modal_image_link_tower = nn.ModuleList([LinkTower(cfg, device) for _ in range(X - 1)])

    def forward(self, input_ids, attention_mask, pixel_values):
        """Returns a dict: text_hidden [Lt+1 x (B,T,Ht)], image_hidden [Lv+1 x (B,Np,Hv)] (index 0 =
        after ln_pre, no ln_post), cross_text_in / cross_image_in [X x] (X'_k, Y'_k: inputs of cross
        layer k), cross_text / cross_image [X x] (X_k, Y_k), text_features, image_features,
        pooler_output (B, 2H) = [text pooled, image pooled]."""
        cfg = self.cfg
        text = self.text_model
        visual = self.vision_model.visual
        n_text = len(text.encoder.layer)
        X = cfg.num_hidden_layers
        split = n_text - X + 1  # layers 0..split-1 run before the first bridge

        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask_t = extended_mask(attention_mask)   # (B, 1, 1, T); the image side has no mask

        t = text.embeddings(input_ids)           # (B, T, Ht)
        text_hidden = [t]
        for layer in text.encoder.layer[:split]:
            t = layer(t, mask_t)
            text_hidden.append(t)

        v = visual.ln_pre(visual.embeddings(pixel_values))   # (B, Np, Hv)
        image_hidden = [v]
        for block in visual.transformer.resblocks[:split]:
            v = block(v)
            image_hidden.append(v)

        tt_text = self.token_type_embeddings.weight[0]       # (H,)
        tt_image = self.token_type_embeddings.weight[1]

        # cross layer 0: modality embedding added before the first-layer LN, no link tower
        x_in = self.cross_modal_text_layernorm(self.cross_modal_text_transform(t) + tt_text)
        y_in = self.cross_modal_image_layernorm(self.cross_modal_image_transform(visual.ln_post(v)) + tt_image)
        cross_text_in, cross_image_in = [x_in], [y_in]
        # both layers read the same pre-update pair (x_in, y_in)
        x = self.cross_modal_text_layers[0](x_in, y_in, mask_t, None)
        y = self.cross_modal_image_layers[0](y_in, x_in, None, mask_t)
        cross_text, cross_image = [x], [y]

        for k in range(1, X):
            i = split - 1 + k
            t = text.encoder.layer[i](t, mask_t)
            v = visual.transformer.resblocks[i](v)
            text_hidden.append(t)
            image_hidden.append(v)
            u_t = self.cross_modal_text_transform(t) + tt_text
            u_i = self.cross_modal_image_transform(visual.ln_post(v)) + tt_image
            x_in = self.cross_modal_text_link_tower[k - 1](u_t, x)
            y_in = self.cross_modal_image_link_tower[k - 1](u_i, y)
            cross_text_in.append(x_in)
            cross_image_in.append(y_in)
            x = self.cross_modal_text_layers[k](x_in, y_in, mask_t, None)
            y = self.cross_modal_image_layers[k](y_in, x_in, None, mask_t)
            cross_text.append(x)
            cross_image.append(y)

        pooled = torch.cat([self.cross_modal_text_pooler(x), self.cross_modal_image_pooler(y)], dim=-1)
        return dict(text_hidden=text_hidden, image_hidden=image_hidden, cross_text_in=cross_text_in,
                    cross_image_in=cross_image_in, cross_text=cross_text, cross_image=cross_image,
                    text_features=x, image_features=y, pooler_output=pooled)


# ----------------------------------------------------------------------------------------------
# Heads

class ITMHead(nn.Module):
    def __init__(self, hidden2, device=None):
        super().__init__()
        self.fc = nn.Linear(hidden2, 2, device=device)


class MLMTransform(nn.Module):
    def __init__(self, cfg, device=None):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size, device=device)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, device=device)

    def forward(self, x):
        return self.LayerNorm(F.gelu(self.dense(x)))


class MLMHead(nn.Module):
    """transform (dense, GELU, LN) -> decoder (no bias, untied) + separate `bias`."""

    def __init__(self, cfg, device=None):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cfg.text.vocab_size, device=device))
        self.transform = MLMTransform(cfg, device)
        self.decoder = nn.Linear(cfg.hidden_size, cfg.text.vocab_size, bias=False, device=device)

    def forward(self, x):
        return self.decoder(self.transform(x)) + self.bias


class ContrastiveHead(nn.Module):
    def __init__(self, d_in, d_out, device=None):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out, device=device)


HEADS_ALL = ("itm", "mlm", "itc")


class BridgeTowerTwin(nn.Module):
    """Backbone (`bridgetower.`) plus any of the heads ("itm", "mlm", "itc")."""

    def __init__(self, cfg, heads=HEADS_ALL, device=None):
        super().__init__()
        self.cfg = cfg
        self.heads = tuple(heads)
        H = cfg.hidden_size
        self.bridgetower = BridgeTowerBackbone(cfg, device)
        if "itm" in heads:
            self.itm_score = ITMHead(2 * H, device)
        if "mlm" in heads:
            self.mlm_score = MLMHead(cfg, device)
        if "itc" in heads:
            C = cfg.contrastive_hidden_size
            if not C:
                raise ValueError("the itc heads need contrastive_hidden_size in config.json")
            self.itc_text_head = ContrastiveHead(H, C, device)
            self.itc_image_head = ContrastiveHead(H, C, device)
            self.itc_cross_modal_head = ContrastiveHead(2 * H, C, device)
            self.logit_scale = nn.Parameter(torch.tensor(float(cfg.logit_scale_init_value), device=device))

    def forward(self, input_ids, attention_mask, pixel_values, itm_labels=None, mlm_labels=None,
                itc_loss=True):
        """All of the backbone's outputs plus, per head present: itm_logits (B,2) [+ loss_itm],
        mlm_logits (B,T,V) [+ loss_mlm], itc_text_embeds / itc_image_embeds / itc_cross_embeds
        (B,C) L2-normalized, itc_logits (B,3,C) stacked [text, image, cross] [+ loss_itc]."""
        out = self.bridgetower(input_ids, attention_mask, pixel_values)
        if "itm" in self.heads:
            out["itm_logits"] = self.itm_score.fc(out["pooler_output"])
            if itm_labels is not None:
                out["loss_itm"] = F.cross_entropy(out["itm_logits"], itm_labels)
        if "mlm" in self.heads:
            out["mlm_logits"] = self.mlm_score(out["text_features"])
            if mlm_labels is not None:
                V = out["mlm_logits"].shape[-1]
                out["loss_mlm"] = F.cross_entropy(out["mlm_logits"].reshape(-1, V), mlm_labels.reshape(-1),
                                                  ignore_index=-100)
        if "itc" in self.heads:
            bt = self.bridgetower
            t_cls = out["text_hidden"][-1][:, 0]                       # raw last text layer CLS
            v_last = bt.vision_model.visual.ln_post(out["image_hidden"][-1])
            v_cls = (bt.cross_modal_image_transform(v_last) + bt.token_type_embeddings.weight[1])[:, 0]
            te = F.normalize(self.itc_text_head.fc(t_cls), dim=-1, p=2)
            ie = F.normalize(self.itc_image_head.fc(v_cls), dim=-1, p=2)
            ce = F.normalize(self.itc_cross_modal_head.fc(out["pooler_output"]), dim=-1, p=2)
            out["itc_text_embeds"], out["itc_image_embeds"], out["itc_cross_embeds"] = te, ie, ce
            out["itc_logits"] = torch.stack([te, ie, ce], dim=-2)
            if itc_loss:
                s = self.logit_scale.exp()  # no clamp
                target = torch.arange(te.shape[0], device=te.device)
                out["loss_itc"] = (F.cross_entropy(te @ ie.t() * s, target)
                                   + F.cross_entropy(te @ ce.t() * s, target)
                                   + F.cross_entropy(ie @ ce.t() * s, target)) / 3.0
        return out


# ----------------------------------------------------------------------------------------------
# HF's initialization (docs/spec.md §6, transformers 4.27 `_init_weights`)

@torch.no_grad()
def hf_init_(model, generator):
    """Draws every parameter by HF's rules from `generator` (a torch.Generator), in
    named_parameters() order:
      Linear / Conv2d / Embedding weights ~ N(0, (0.05 f)^2), Linear biases 0, LayerNorm 1 / 0;
      vision (CLIP rule, the vision tower's own width W and depth L): in_proj_weight, class and
      position embeddings ~ N(0, W^-1); out_proj and c_proj ~ N(0, W^-1 (2L)^-1); c_fc ~ N(0, (2W)^-1);
      in_proj_bias 0; mlm_score.bias 0; logit_scale = logit_scale_init_value;
      scaled_factor 1; beta 0.5. Embedding padding rows are not zeroed (HF overwrites them)."""
    cfg = model.cfg if hasattr(model, "cfg") else None
    f = float(cfg.initializer_factor) if cfg is not None else 1.0
    W = cfg.vision.hidden_size
    L = cfg.vision.num_hidden_layers
    attn_std = W ** -0.5
    proj_std = W ** -0.5 * (2 * L) ** -0.5
    fc_std = (2 * W) ** -0.5
    kinds = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            key = (mname + "." if mname else "") + pname
            kinds[key] = (mod, pname)

    def normal(p, std):
        p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float32) * std)

    for key, p in model.named_parameters():
        mod, pname = kinds[key]
        vision = ".vision_model.visual." in "." + key
        if isinstance(mod, nn.LayerNorm):
            p.fill_(1.0 if pname == "weight" else 0.0)
        elif pname.endswith("bias"):
            p.zero_()  # Linear biases, in_proj_bias, mlm_score.bias
        elif pname == "logit_scale":
            p.fill_(float(cfg.logit_scale_init_value))
        elif pname == "scaled_factor":
            p.fill_(1.0)
        elif pname == "beta":
            p.fill_(0.5)
        elif vision and (pname == "in_proj_weight" or key.endswith("embeddings.class_embedding")
                         or key.endswith("embeddings.position_embedding.weight")):
            normal(p, attn_std * f)
        elif vision and (key.endswith("attn.out_proj.weight") or key.endswith("mlp.c_proj.weight")):
            normal(p, proj_std * f)
        elif vision and key.endswith("mlp.c_fc.weight"):
            normal(p, fc_std * f)
        elif isinstance(mod, (nn.Linear, nn.Conv2d, nn.Embedding)) and pname == "weight":
            normal(p, 0.05 * f)
        else:
            raise AssertionError("no init rule for " + key)


# ----------------------------------------------------------------------------------------------
# Weights I/O

def load_weights(model, tensors, strict=True):
    """Copies tensors (name -> tensor, HF key names; a missing `bridgetower.` prefix is accepted,
    *position_ids / *token_type_ids buffers are skipped) into model. strict: every parameter must
    be present and no unknown key may remain."""
    own = dict(model.named_parameters())
    seen = set()
    unknown = []
    with torch.no_grad():
        for name, t in tensors.items():
            if name.endswith("position_ids") or name.endswith("token_type_ids"):
                continue
            key = name if name in own else "bridgetower." + name
            if key not in own:
                unknown.append(name)
                continue
            if tuple(own[key].shape) != tuple(t.shape):
                raise ValueError("%s: shape %s, model expects %s" % (name, tuple(t.shape), tuple(own[key].shape)))
            own[key].copy_(t.to(own[key].dtype))
            seen.add(key)
    missing = sorted(set(own) - seen)
    if strict and (missing or unknown):
        raise ValueError("missing keys %s; unknown keys %s" % (missing[:8], unknown[:8]))
    return missing, unknown


def count_parameters(cfg, heads=()):
    """(number of tensors, number of elements) without allocating (meta device)."""
    m = BridgeTowerTwin(cfg, heads=heads, device="meta")
    ps = list(m.parameters())
    return len(ps), sum(p.numel() for p in ps)


def main(argv):
    """Usage: bt_reference.py count CONFIG_DIR [itm,mlm,itc]  -> prints tensor/element counts;
              bt_reference.py keys CONFIG_DIR [heads]           -> prints key<TAB>shape<TAB>numel."""
    if len(argv) < 3 or argv[1] not in ("count", "keys"):
        print(main.__doc__)
        return 2
    cfg = load_config(argv[2])
    heads = tuple(h for h in (argv[3].split(",") if len(argv) > 3 else []) if h)
    if argv[1] == "count":
        n_t, n_p = count_parameters(cfg, ())
        print("backbone: %d tensors, %d parameters" % (n_t, n_p))
        if heads:
            n_t, n_p = count_parameters(cfg, heads)
            print("backbone+%s: %d tensors, %d parameters" % ("+".join(heads), n_t, n_p))
    else:
        m = BridgeTowerTwin(cfg, heads=heads, device="meta")
        for k, p in m.named_parameters():
            print("%s\t%s\t%d" % (k, list(p.shape), p.numel()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
