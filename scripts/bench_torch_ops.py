#!/usr/bin/python3
"""bench_torch_ops.py: PyTorch's time for the kernels tests/bench_ops.c measures.

Run with Debian's torch (1.13): OMP_NUM_THREADS=2 /usr/bin/python3 scripts/bench_torch_ops.py
Prints a markdown table: kernel, shape, torch ms, torch GB/s (with bench_ops' byte counts, so
the GB/s columns compare directly), then attention fwd/bwd time and GFLOP/s. Protocol as
bench_ops: a warm-up call, then the best of --rounds rounds of about --seconds each.

What runs for each row (the torch operator a PyTorch training step would run):
  layernorm        aten.native_layer_norm / aten.native_layer_norm_backward
  gelu             F.gelu (erf) / aten.gelu_backward
  quick_gelu       x * sigmoid(1.702 x) as HF writes it / its autograd backward
  softmax          torch.softmax / aten._softmax_backward_data
  bias_add         x + b / (dx += dout, db += dout.sum(0))
  residual         a + b / (da += dout, db += dout), what autograd's gradient accumulation does
  dropout          F.dropout(p=0.1, training=True)
  bf16 conversion  x.to(bfloat16) / h.to(float32)
  embedding        F.embedding / aten.embedding_dense_backward (padding_idx 1)
  cross_entropy    F.cross_entropy(ignore_index=-100) / its autograd backward
  attention        (B, T, 12, 64) views of packed projections, scores + key mask, softmax,
                   dropout, value product; backward through autograd. bf16: the same with
                   bfloat16 tensors (torch 1.13 CPU runs bf16 matmuls through oneDNN).
Deliberately not here: anything bt computes (this only times PyTorch).
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F


def best_time(fn, rounds, seconds):
    fn()  # warm-up
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-9)
    iters = max(1, min(10000, int(seconds / one)))
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best


def memory_bound(rounds, seconds):
    TEXT, IMG, FFN, SCORES = 2 * 40, 2 * 325, 8 * 325, 2 * 12 * 325
    g = torch.Generator().manual_seed(0)

    def rnd(*shape, lo=-1.0, hi=1.0):
        return torch.rand(*shape, generator=g) * (hi - lo) + lo

    rows = []

    def add(kernel, shape, n, c, per_elem, per_row, per_col, fn):
        bytes_ = per_elem * n * c + per_row * n + per_col * c
        t = best_time(fn, rounds, seconds)
        rows.append((kernel, shape, bytes_ / 1e6, t * 1e3, bytes_ / t / 1e9))
        print("| %s | %s | %.1f | %.3f | %.1f |" % rows[-1], flush=True)

    print("| kernel | shape | MB moved | torch ms | torch GB/s |")
    print("|---|---|---:|---:|---:|")
    for shape, n, c in (("image 650x768", IMG, 768), ("ffn 2600x3072", FFN, 3072)):
        x, w, b = rnd(n, c, lo=-3, hi=3), rnd(c, lo=0.5, hi=1.5), rnd(c)
        out, mean, rstd = torch.ops.aten.native_layer_norm(x, [c], w, b, 1e-5)
        add("layernorm fwd", shape, n, c, 8, 8, 8,
            lambda: torch.ops.aten.native_layer_norm(x, [c], w, b, 1e-5))
    for shape, n, c in (("image 650x768", IMG, 768), ("ffn 2600x3072", FFN, 3072)):
        x, w, b = rnd(n, c, lo=-3, hi=3), rnd(c, lo=0.5, hi=1.5), rnd(c)
        out, mean, rstd = torch.ops.aten.native_layer_norm(x, [c], w, b, 1e-5)
        dout = rnd(n, c)
        add("layernorm bwd", shape, n, c, 16, 8, 20,
            lambda: torch.ops.aten.native_layer_norm_backward(dout, x, [c], mean, rstd, w, b,
                                                              [True, True, True]))
    x, dout = rnd(FFN, 3072, lo=-3, hi=3), rnd(FFN, 3072)
    add("gelu fwd", "ffn 2600x3072", FFN, 3072, 8, 0, 0, lambda: F.gelu(x))
    add("gelu bwd", "ffn 2600x3072", FFN, 3072, 16, 0, 0,
        lambda: torch.ops.aten.gelu_backward(dout, x))
    xt = rnd(TEXT, 3072, lo=-3, hi=3)
    add("gelu fwd", "text 80x3072", TEXT, 3072, 8, 0, 0, lambda: F.gelu(xt))
    add("quick_gelu fwd", "ffn 2600x3072", FFN, 3072, 8, 0, 0,
        lambda: x * torch.sigmoid(1.702 * x))
    xq = x.clone().requires_grad_(True)
    yq = xq * torch.sigmoid(1.702 * xq)
    add("quick_gelu bwd", "ffn 2600x3072", FFN, 3072, 16, 0, 0,
        lambda: torch.autograd.grad(yq, xq, dout, retain_graph=True))
    s = rnd(SCORES, 325, lo=-8, hi=8)
    ys = torch.softmax(s, -1)
    ds = rnd(SCORES, 325)
    add("softmax fwd", "scores 7800x325", SCORES, 325, 8, 0, 0, lambda: torch.softmax(s, -1))
    add("softmax bwd", "scores 7800x325", SCORES, 325, 16, 0, 0,
        lambda: torch.ops.aten._softmax_backward_data(ds, ys, -1, torch.float32))
    bias, dx, db = rnd(3072), rnd(FFN, 3072), rnd(3072)
    add("bias_add fwd", "ffn 2600x3072", FFN, 3072, 8, 0, 4, lambda: x + bias)
    add("bias_add bwd", "ffn 2600x3072", FFN, 3072, 12, 0, 8,
        lambda: (dx.add_(dout), db.add_(dout.sum(0))))
    for shape, n, c in (("image 650x768", IMG, 768), ("ffn 2600x3072", FFN, 3072)):
        a, bb = rnd(n, c), rnd(n, c)
        add("residual fwd", shape, n, c, 12, 0, 0, lambda: a + bb)
    da, dbb = rnd(FFN, 3072), rnd(FFN, 3072)
    add("residual bwd", "ffn 2600x3072", FFN, 3072, 20, 0, 0,
        lambda: (da.add_(dout), dbb.add_(dout)))
    add("dropout fwd", "ffn 2600x3072", FFN, 3072, 8, 0, 0,
        lambda: F.dropout(x, 0.1, training=True))
    h = x.to(torch.bfloat16)
    add("bf16_from_f32", "ffn 2600x3072", FFN, 3072, 6, 0, 0, lambda: x.to(torch.bfloat16))
    add("f32_from_bf16", "ffn 2600x3072", FFN, 3072, 6, 0, 0, lambda: h.to(torch.float32))
    table = rnd(50265, 768)
    for shape, n in (("text 80x768", TEXT), ("image 650x768", IMG)):
        ids = (torch.arange(n) * 7919) % 50265
        add("embedding fwd", shape, n, 768, 8, 4, 0, lambda: F.embedding(ids, table))
    ids = (torch.arange(IMG) * 7919) % 50265
    de = rnd(IMG, 768)
    add("embedding bwd", "image 650x768", IMG, 768, 12, 4, 0,
        lambda: torch.ops.aten.embedding_dense_backward(de, ids, 50265, 1, False))
    logits = rnd(TEXT, 50265, lo=-3, hi=3)
    targets = (torch.arange(TEXT) * 7919) % 50265
    add("cross_entropy fwd", "mlm 80x50265", TEXT, 50265, 8, 4, 0,
        lambda: F.cross_entropy(logits, targets, ignore_index=-100))
    lg = logits.clone().requires_grad_(True)
    loss = F.cross_entropy(lg, targets, ignore_index=-100)
    add("cross_entropy bwd", "mlm 80x50265", TEXT, 50265, 12, 4, 0,
        lambda: torch.autograd.grad(loss, lg, retain_graph=True))


def attention(rounds, seconds):
    B, NH, D = 2, 12, 64
    C = NH * D
    print()
    print("| attention (B=2 NH=12 D=64, dropout 0.1, key mask) | compute | torch fwd ms | "
          "fwd GFLOP/s | torch bwd ms | bwd GFLOP/s |")
    print("|---|---|---:|---:|---:|---:|")
    g = torch.Generator().manual_seed(1)
    for name, tq, tk in (("self image T=325", 325, 325), ("self text T=40", 40, 40),
                         ("cross text->image 40x325", 40, 325)):
        for dtype in (torch.float32, torch.bfloat16):
            q = (torch.rand(B, tq, C, generator=g) * 2 - 1).to(dtype).requires_grad_(True)
            k = (torch.rand(B, tk, C, generator=g) * 2 - 1).to(dtype).requires_grad_(True)
            v = (torch.rand(B, tk, C, generator=g) * 2 - 1).to(dtype).requires_grad_(True)
            mask = torch.ones(B, tk)
            mask[1, tk - tk // 8:] = 0
            bias = ((1.0 - mask) * torch.finfo(dtype).min).to(dtype)[:, None, None, :]

            def fwd():
                qh = q.view(B, tq, NH, D).transpose(1, 2)
                kh = k.view(B, tk, NH, D).transpose(1, 2)
                vh = v.view(B, tk, NH, D).transpose(1, 2)
                s = qh @ kh.transpose(-1, -2) / 8.0 + bias
                p = F.dropout(torch.softmax(s, -1), 0.1, training=True)
                return (p @ vh).transpose(1, 2).reshape(B, tq, C)

            out = fwd()
            dout = torch.rand_like(out)
            flop = 4.0 * B * NH * tq * tk * D
            tf = best_time(fwd, rounds, seconds)
            tb = best_time(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                           rounds, seconds)
            print("| %s | %s | %.3f | %.1f | %.3f | %.1f |" % (
                name, "fp32" if dtype == torch.float32 else "bf16", tf * 1e3, flop / tf / 1e9,
                tb * 1e3, 2 * flop / tb / 1e9), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.2)
    ap.add_argument("--only", choices=("memory", "attention"))
    args = ap.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    torch.set_num_threads(threads)
    print("bench_torch_ops: torch %s, %d thread(s), best of %d rounds" % (
        torch.__version__, torch.get_num_threads(), args.rounds))
    print()
    if args.only in (None, "memory"):
        memory_bound(args.rounds, args.seconds)
    if args.only in (None, "attention"):
        attention(args.rounds, args.seconds)


if __name__ == "__main__":
    main()
