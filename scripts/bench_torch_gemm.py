#!/usr/bin/python3
"""bench_torch_gemm.py: PyTorch's GEMM GFLOP/s on the shapes tests/bench_gemm.c measures.

Run with Debian's torch (1.13): OMP_NUM_THREADS=2 /usr/bin/python3 scripts/bench_torch_gemm.py
Prints one row per shape: fp32 and bf16 (torch.bfloat16 tensors). Debian's torch runs fp32
matmul through the system OpenBLAS and bf16 through oneDNN (libdnnl 2.6). Each number is the
flop count over the fastest single call among the calls made in about --seconds (at least
3), repeated --passes times keeping the best: the same protocol as bench_gemm.

The operations mirror bench_gemm's rows:
  fwd  torch.nn.functional.linear(x (N, C), W (OC, C), b)        -> x·Wᵀ + b
  dX   dout (N, OC) @ W (OC, C)
  dW   dout.t() @ x, accumulated into an existing (OC, C) tensor (addmm_, beta 1)
  attn scores Q_h K_hᵀ / 8 and values P·V_h for the 12 heads of one 325-token image, with
       Q, K, V as (T, 768) projections viewed as (T, 12, 64) and permuted (no copy by us;
       torch.matmul makes what it needs).
Deliberately not here: anything bt computes (this only times PyTorch).
"""
import argparse
import os
import time

import torch


def best_gflops(fn, flop, seconds):
    fn()  # warm-up
    start = time.perf_counter()
    best = float("inf")
    calls = 0
    while calls < 3 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        calls += 1
    return flop / best * 1e-9


def linear_rows(n_tok, c_in, c_out, backward):
    rows = []

    def fwd(dt):
        x = torch.rand(n_tok, c_in, dtype=dt) * 2 - 1
        w = torch.rand(c_out, c_in, dtype=dt) * 2 - 1
        b = torch.rand(c_out, dtype=dt) * 2 - 1
        return lambda: torch.nn.functional.linear(x, w, b)

    rows.append((f"fwd  {n_tok}x{c_out}x{c_in}", 2.0 * n_tok * c_out * c_in, fwd))
    if backward:
        def dx(dt):
            d = torch.rand(n_tok, c_out, dtype=dt) * 2 - 1
            w = torch.rand(c_out, c_in, dtype=dt) * 2 - 1
            return lambda: torch.matmul(d, w)

        def dw(dt):
            d = torch.rand(n_tok, c_out, dtype=dt) * 2 - 1
            x = torch.rand(n_tok, c_in, dtype=dt) * 2 - 1
            g = torch.zeros(c_out, c_in, dtype=dt)
            return lambda: g.addmm_(d.t(), x)

        rows.append((f"dX   {n_tok}x{c_in}x{c_out}", 2.0 * n_tok * c_in * c_out, dx))
        rows.append((f"dW   {c_out}x{c_in}x{n_tok} T", 2.0 * n_tok * c_in * c_out, dw))
    return rows


def attention_rows(t=325, nh=12, d=64):
    c = nh * d

    def scores(dt):
        q = (torch.rand(t, c, dtype=dt) * 2 - 1).view(t, nh, d).permute(1, 0, 2)
        k = (torch.rand(t, c, dtype=dt) * 2 - 1).view(t, nh, d).permute(1, 2, 0)
        return lambda: torch.matmul(q, k) * 0.125

    def values(dt):
        p = torch.rand(nh, t, t, dtype=dt)
        v = (torch.rand(t, c, dtype=dt) * 2 - 1).view(t, nh, d).permute(1, 0, 2)
        return lambda: torch.matmul(p, v)

    return [
        (f"attn QKt {nh}x({t}x{t}x{d})", 2.0 * nh * t * t * d, scores),
        (f"attn PV  {nh}x({t}x{d}x{t})", 2.0 * nh * t * d * t, values),
    ]


def square_rows():
    rows = []
    for s in (1024, 2048):
        def sq(dt, s=s):
            a = torch.rand(s, s, dtype=dt)
            b = torch.rand(s, s, dtype=dt)
            return lambda: torch.matmul(a, b)

        rows.append((f"square {s}^3", 2.0 * s ** 3, sq))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=0.8)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"mkldnn {torch.backends.mkldnn.is_available()}, "
          f"fastest call in ~{args.seconds} s of calls, best of {args.passes} pass(es)")
    rows = []
    for n_tok in (2 * 40, 2 * 325, 8 * 325):
        bwd = n_tok >= 650
        rows += linear_rows(n_tok, 768, 768, bwd)
        rows += linear_rows(n_tok, 768, 3072, bwd)
        rows += linear_rows(n_tok, 3072, 768, bwd)
    rows += attention_rows()
    rows += square_rows()
    best = {}
    for p in range(args.passes):
        for name, flop, make in rows:
            g32 = best_gflops(make(torch.float32), flop, args.seconds)
            g16 = best_gflops(make(torch.bfloat16), flop, args.seconds)
            o32, o16 = best.get(name, (0.0, 0.0))
            best[name] = (max(o32, g32), max(o16, g16))
    print(f"\n{'shape (m x n x k)':30s} {'GFLOP':>8s} {'torch32':>9s} {'torch16':>9s} {'x16/32':>7s}")
    peak32 = peak16 = 0.0
    for name, flop, _ in rows:
        g32, g16 = best[name]
        print(f"{name:30s} {flop * 1e-9:8.3f} {g32:9.1f} {g16:9.1f} {g16 / g32:7.2f}")
        if flop >= 1e9:
            peak32, peak16 = max(peak32, g32), max(peak16, g16)
    print(f"\n# torch GEMM peak (best over shapes >= 1 GFLOP): fp32 {peak32:.1f}, "
          f"bf16 {peak16:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
