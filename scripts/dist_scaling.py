#!/usr/bin/env python3
"""dist_scaling.py: the scaling model of docs/distributed.md (Python stdlib only).

Data-parallel step time on N ranks = compute + the all-reduce time the step waits for:

  all-reduce of one bucket of s bytes (ring reduce-scatter + all-gather, with Open MPI's
  log-depth latency for large N):   t(s) = 2 log2(N) * alpha + 2 (N - 1) / N * s / BW
  whole gradient buffer of G bytes in buckets of b:  T = ceil(G / b) * t(b)   (approx.)
  exposed, no overlap (buckets launched after the backward, dist.overlap=false):  E = T
  exposed, bt now (each bucket launched at the backward event that finishes it; a fraction f
      of the buffer is launched before the backward ends, bench_dist prints it: 99.3% for
      large at 25 MiB, the rest waits for the last event):
      E = max(T - min(f * T, (1 - b / G) * t_bwd), t(b))
  exposed, ideal overlap (every bucket launched as the backward finishes it):
      E = max(T - (1 - b / G) * t_bwd, t(b))   (the last bucket can never hide)
  samples/s = N * batch / (t_compute + E)

The per-device compute time comes from the reference runs (bridgetower-large, batch 40 per
device, 8 devices on one machine whose links hide the all-reduce): t_compute = 40 / (R / 8),
backward = 2/3 of it (a backward costs about twice a forward). Pass --step-s / --batch to
plug in another device (e.g. a bt CPU rank measured with tests/bench_step).

  /usr/bin/python3 scripts/dist_scaling.py            # the tables of docs/distributed.md
"""
import argparse
import math

REFERENCE = {"Gaudi2": 847.7, "H100": 602.1, "A100": 345.4}  # samples/s, 8 devices, large
LARGE_PARAMS = 919190108  # bridgetower-large-itm-mlm-itc, every head (bench_dist's count)


def allreduce_s(n, nbytes, bw_bytes, alpha):
    if n == 1:
        return 0.0
    return 2 * math.log2(n) * alpha + 2 * (n - 1) / n * nbytes / bw_bytes


def exposed(n, grad_bytes, bucket_bytes, bw_bytes, alpha, t_bwd, early):
    """Exposed seconds when a fraction `early` of the buffer is launched during the backward
    (0: no overlap, 1: ideal)."""
    nb = max(1, math.ceil(grad_bytes / bucket_bytes))
    b = grad_bytes / nb
    total = nb * allreduce_s(n, b, bw_bytes, alpha)
    if early <= 0:
        return total
    hidden = min(early * total, (1 - b / grad_bytes) * t_bwd)
    return max(total - hidden, allreduce_s(n, b, bw_bytes, alpha))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--params", type=int, default=LARGE_PARAMS)
    ap.add_argument("--wire-bytes", type=int, default=4, help="4 fp32 (bt), 2 bf16")
    ap.add_argument("--alpha-us", type=float, default=10.0, help="per-message latency")
    ap.add_argument("--batch", type=int, default=40, help="per rank")
    ap.add_argument("--overlap-fraction", type=float, default=0.993,
                    help="f: part of the buffer bt launches before the backward ends "
                         "(bench_dist prints it: 99.3%% for large with every head, 25 MiB)")
    ap.add_argument("--step-s", type=float, default=0.0,
                    help="per-rank compute seconds per step (0: from the reference runs)")
    args = ap.parse_args()
    G = args.params * args.wire_bytes
    alpha = args.alpha_us * 1e-6
    devices = ({"given": args.batch / args.step_s} if args.step_s > 0
               else {k: v / 8 for k, v in REFERENCE.items()})
    print(f"gradient buffer {G / 2**30:.2f} GiB ({args.params} params x {args.wire_bytes} B), "
          f"alpha {args.alpha_us:g} us, batch {args.batch} per rank")
    print(f"bt now: f = {args.overlap_fraction:g}")
    print("\n| device | ranks | Gb/s | bucket MiB | step s (compute) | exposed s no overlap | "
          "samples/s no overlap | eff. | exposed s bt now | samples/s bt now | eff. | "
          "exposed s ideal overlap | samples/s ideal | eff. |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for dev, per_dev in devices.items():
        tc = args.batch / per_dev
        tb = tc * 2 / 3
        for n in (8, 64, 512):
            for gbps in (25, 100, 400):
                bw = gbps * 1e9 / 8
                best = None
                for mib in (4, 25, 100):
                    e_ov = exposed(n, G, mib * 2**20, bw, alpha, tb, 1.0)
                    if best is None or e_ov < best[1]:
                        best = (mib, e_ov)
                mib, e_ov = best
                e_no = exposed(n, G, mib * 2**20, bw, alpha, tb, 0.0)
                e_bt = exposed(n, G, mib * 2**20, bw, alpha, tb, args.overlap_fraction)
                ideal = n * args.batch / tc
                s_no = n * args.batch / (tc + e_no)
                s_bt = n * args.batch / (tc + e_bt)
                s_ov = n * args.batch / (tc + e_ov)
                print(f"| {dev} | {n} | {gbps} | {mib} | {tc:.3f} | {e_no:.3f} | {s_no:.0f} | "
                      f"{s_no / ideal:.0%} | {e_bt:.3f} | {s_bt:.0f} | {s_bt / ideal:.0%} | "
                      f"{e_ov:.3f} | {s_ov:.0f} | {s_ov / ideal:.0%} |")


if __name__ == "__main__":
    main()
