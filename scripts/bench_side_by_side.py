#!/usr/bin/python3
"""bench_side_by_side.py: bt and its PyTorch twin on the same machine, configuration and thread
count, in one command (issue 9 item 1; results go to docs/benchmarks.md "Side by side").

    /usr/bin/python3 scripts/bench_side_by_side.py [--build build] [--threads N] [--quick]
        [--steps N] [--budget S] [--no-large] [--no-twin] [--isa CLASS] [--json-out FILE]
        [--python PATH]
    /usr/bin/python3 scripts/bench_side_by_side.py --scaling [--scaling-precision best|fp32|bf16]
        [--only DIM[=N,...]] [--jobs J] [--quick] [--threads N] [--steps N] [--budget S]
        [--no-twin] ...

Runs, each in its own process (so peak RSS is that run's):
  train  the full training step: forward, ITC loss (HF's three contrastive cross entropies),
         backward, global-norm clip 1.0, AdamW (lr 1e-5, wd 0.01), dropout on.
         bt: tests/bench_step.c (bt_train_step, src/train/step.h).
         twin: scripts/bt_reference.py's BridgeTowerTwin (ITC head), torch.optim.AdamW.
  infer  the embedding path bt-embed runs for retrieval: backbone + ITC head, eval mode,
         no gradient (twin: torch.no_grad()).
  on bridgetower-base (288 px, text 40, batch 8) and bridgetower-large-itm-mlm-itc (294 px)
  when the memory estimate fits in MemAvailable (bt's training step with gradient checkpointing,
  bench_step --checkpoint, when only that fits); each in fp32 and in bf16 (bt: --precision
  bf16, mixed precision with fp32 master weights; twin: eager fp32 and
  torch.autocast('cpu', dtype=torch.bfloat16)). Random weights (HF init rules) and inputs.
  --quick: the tiny config (32 px, text 16, batch 4, 3 steps): a smoke test in seconds.
The twin runs under --python (default /usr/bin/python3, where Debian's python3-torch is), in
PyTorch's tuned environment (bt too with --same-env; otherwise bt gets only
OMP_NUM_THREADS, and bench_step sets OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000 itself as bt's
tools do): OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=1000 (both: docs/benchmarks.md "Results
(session 19)"),
OPENBLAS_THREAD_TIMEOUT=4, MALLOC_TRIM_THRESHOLD_ / MALLOC_MMAP_THRESHOLD_ raised so glibc
keeps freed memory instead of returning (and re-faulting) it, torch.set_num_threads(N). Where
OpenBLAS does not know this CPU model and falls back to its SSE3 kernels (openblas_core_fix),
OPENBLAS_CORETYPE names its kernels for this CPU's flags, for every run and the GEMM peak.
A twin mode that cannot finish its steps within --budget seconds is stopped and reported as
such (the steps it finished, if any, are shown).
--isa avx512_bf16 | avx512 | avx2 runs everything as on a CPU of that class (ISA_CLASSES):
bt's kernels (BT_CPU_ISA), oneDNN in both bt and torch (DNNL_MAX_CPU_ISA: torch 1.13 bundles
oneDNN 2.6, which reads it), OpenBLAS (OPENBLAS_CORETYPE) and torch's own vectorized kernels
(ATEN_CPU_CAPABILITY) capped together, the GEMM peak included. What a capped run cannot
emulate: the other class's memory system, clock and core (a real AVX2-only Zen 4 or an
AVX512-BF16 Xeon without AMX); the capped numbers are this machine's cores running those
instruction sets.

Reported per run: first step seconds, median of the later steps (and a note under the ratios
when a run's last step is more than 5% under that median: it was still speeding up, and the
ratio reads high or low by up to that), samples/s from that median,
peak RSS, achieved GFLOP/s from the model's analytic FLOP count (src/model/flops.c, printed
by bench_step: every GEMM and attention product of the forward, x3 for training; checked
against the matmuls oneDNN executes: within 0.005%), the same FLOPs for both implementations; the machine's GEMM peak
measured in the same run by tests/bench_gemm.c (the best single call over all its products of at
least 1 GFLOP: the model's own Linear shapes and two squares; fp32: OpenBLAS and oneDNN, bf16:
oneDNN as the model calls it and with bf16 operands), and the ratios issue 9 sets targets for.
Until session 6 the peak came from the squares alone, which on AMX run well below the Linear
shapes (docs/benchmarks.md), so the shares of the peak printed before then read too high.
Around every run (both uses), the machine probe: bench_gemm's 1024 square on the run's threads
(its median call in 0.5 s of calls; --quick 0.05 s) before and after it, and this guest's steal
seconds during it (/proc/stat), in the run's JSON as "machine" and listed in the "# machine:"
lines. Two runs compared whose probes differ did not see the same machine: on a shared VM a
neighbour can halve the products' speed without any steal time (docs/benchmarks.md "Session
37"), and the ratio of the two runs is then uncertain by about that much.

--scaling (issue 25 item 6; docs/benchmarks.md "Scaling"): the training step above, bt and the
twin each in its best precision here (bt bf16 where bt-forward --info says "gemm bf16 choice:
native", the twin bf16 autocast where, in addition, the CPU has AVX512-BF16 or AMX; else fp32),
against
batch 1..32 (image 288, text 40, --threads), image side 224/288/384 and text length 40/128
(batch 8), threads 1 and 2 (batch 8), and ranks: 1 process x 2 threads against 2 processes x
1 thread on a global batch of 8 (bt: bench_step under mpirun, bt_train_step data-parallel; the
twin: DistributedDataParallel over gloo in 2 local processes with torchrun's environment). On
bridgetower-base (--quick: tiny, batch 1/2, image 32/48, text 16/32). One markdown table per
dimension: s/step (median, and the first step), samples/s, bt / twin, peak RSS (the ranks'
summed), their ratio and the share of bt's step in its attention kernels; a point that does not
fit in memory is skipped with its estimate (bt with --checkpoint when only that fits, marked), a
twin point past --budget is shown as stopped. Points shared by two tables run once.
--jobs J runs J points at a time, each on its own threads x ranks cores (taskset), when their
memory estimates fit together: for a machine with many more cores than a point uses and little
time (a lent machine's minutes). The points then share the caches and the memory bandwidth, so
the base point runs first alone and then once more among the others, and a note gives both
steps (the tables hold the run alone); a record made with --jobs resumes only with the same J.

--json-out FILE (both uses) is rewritten after every run, atomically, with "complete": false
until the last one is in: a run that is stopped (a machine lent for minutes, a kill) keeps
every result it had finished. --scaling --resume then keeps the points that file holds and runs
the rest and those that failed (it refuses a file of another grid, step count, thread count,
precision, --isa or --jobs); --only runs chosen points.

Exit (both uses): 0; 1 when a run failed (without --scaling: when none ran); 77 when --python
cannot import torch (bt's half ran, the twin's was not checked).

Deliberately not here: per-kernel numbers (bench_ops, bench_gemm), the data loader
(bench_loader), correctness (the test suite).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TWIN_ENV = {
    "OMP_WAIT_POLICY": "PASSIVE",
    "GOMP_SPINCOUNT": "1000",  # spin ~10 us before sleeping: torch's step 7% faster (session 19)
    "OPENBLAS_THREAD_TIMEOUT": "4",
    "MALLOC_TRIM_THRESHOLD_": str(1 << 36),  # never trim the heap top
    "MALLOC_MMAP_THRESHOLD_": str(1 << 25),  # glibc's maximum (32 MiB): big blocks stay in the heap
}

# --isa: the environment that makes bt and torch run as on a CPU of that class (see the top)
ISA_CLASSES = {
    "native": {},
    "avx512_bf16": {"BT_CPU_ISA": "avx512_bf16", "DNNL_MAX_CPU_ISA": "AVX512_CORE_BF16",
                    "OPENBLAS_CORETYPE": "Cooperlake", "ATEN_CPU_CAPABILITY": "avx512"},
    "avx512": {"BT_CPU_ISA": "avx512", "DNNL_MAX_CPU_ISA": "AVX512_CORE",
               "OPENBLAS_CORETYPE": "SkylakeX", "ATEN_CPU_CAPABILITY": "avx512"},
    "avx2": {"BT_CPU_ISA": "avx2", "DNNL_MAX_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell",
             "ATEN_CPU_CAPABILITY": "avx2"},
}

# OpenBLAS 0.3.21 (Debian 12) falls back to its generic Prescott (SSE3) kernels on a CPU model it
# does not know (the Xeon family 6 model 207 of session 30), which made the twin's fp32 step
# 3.4x slower there: its fp32 products go to OpenBLAS (Debian's torch: BLAS_INFO=generic).
# Its best kernels for this CPU's flags, best first: the cores ISA_CLASSES gives the same classes.
OPENBLAS_CORE_BY_FLAG = tuple((flag, ISA_CLASSES[isa]["OPENBLAS_CORETYPE"]) for flag, isa in
                              (("avx512_bf16", "avx512_bf16"), ("avx512bw", "avx512"),
                               ("avx2", "avx2")))


def cpu_flags():
    """This CPU's flags, from /proc/cpuinfo."""
    return next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "").split()


def openblas_core_fix():
    """The OPENBLAS_CORETYPE this CPU's own kernels need when OpenBLAS (libblas.so.3, what the
    twin's torch and bt's BT_GEMM=openblas call) fell back to Prescott here; None when it did
    not, when OPENBLAS_CORETYPE is set already, or when libblas.so.3 is not OpenBLAS."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return None
    probe = ("import ctypes; lib = ctypes.CDLL('libblas.so.3'); "
             "lib.openblas_get_corename.restype = ctypes.c_char_p; "
             "print(lib.openblas_get_corename().decode())")
    core = subprocess.run([sys.executable, "-c", probe], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True).stdout.strip()
    if core != "Prescott":
        return None
    flags = cpu_flags()
    return next((c for f, c in OPENBLAS_CORE_BY_FLAG if f in flags), None)


# ----------------------------------------------------------------------------------------------
# The twin, run as a child process: --twin-worker

def twin_worker(a):
    import resource

    import torch

    sys.path.insert(0, HERE)
    import bt_reference as R

    torch.set_num_threads(a.threads)
    with open(os.path.join(a.config, "config.json")) as f:
        d = json.load(f)
    d.setdefault("contrastive_hidden_size", 512)  # HF's default, as bt's config loader
    if a.image:  # --scaling: another image side; the position embeddings follow (bench_step --image)
        d.setdefault("vision_config", {})["image_size"] = a.image
    cfg = R.config_from_dict(d)
    model = R.BridgeTowerTwin(cfg, heads=("itc",))
    R.hf_init_(model, torch.Generator().manual_seed(1))
    # torchrun's environment (WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT; run_twin_ranks sets
    # it): DistributedDataParallel over gloo, each rank its own rows, as a torchrun user runs HF
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = 0
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        # find_unused_parameters: HF Trainer's choice without gradient checkpointing; the ITC
        # loss leaves the text model's own pooler without a gradient, which DDP refuses else
        model = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    g = torch.Generator().manual_seed(2026 + rank)
    B, T, Rpx = a.batch, a.text, cfg.vision.image_size
    ids = torch.randint(3, cfg.text.vocab_size, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.int64)
    px = torch.randn(B, 3, Rpx, Rpx, generator=g)
    bf16 = a.precision == "bf16"
    train = a.mode == "train"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01) if train else None
    model.train(train)
    times, t_opt = [], []
    start = time.perf_counter()
    for s in range(a.steps):
        t0 = time.perf_counter()
        if train:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = model(ids, mask, px)
            out["loss_itc"].backward()
            t1 = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            t_opt.append(time.perf_counter() - t1)
        else:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                model(ids, mask, px, itc_loss=False)
        times.append(time.perf_counter() - t0)
        if rank == 0:
            print("twin: %s %s step %d: %.3f s" % (a.mode, a.precision, s, times[-1]),
                  file=sys.stderr, flush=True)
        elapsed = time.perf_counter() - start
        stop = s + 1 < a.steps and elapsed + times[-1] > a.budget
        if world > 1:  # rank 0 decides for all, so no rank waits alone in the next all-reduce
            flag = torch.tensor([1 if stop else 0])
            dist.broadcast(flag, 0)
            stop = bool(flag.item())
        if stop:
            break
    later = times[1:] or times
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    rss_sum = rss_max = rss
    if world > 1:  # the job's memory: every rank's peak, summed (bench_step does the same)
        v = torch.tensor([float(rss)], dtype=torch.float64)
        dist.all_reduce(v, op=dist.ReduceOp.SUM)
        w = torch.tensor([float(rss)], dtype=torch.float64)
        dist.all_reduce(w, op=dist.ReduceOp.MAX)
        rss_sum, rss_max = int(v.item()), int(w.item())
        dist.destroy_process_group()
        if rank > 0:
            return 0
    res = dict(impl="twin", mode=a.mode, precision=("bf16-autocast" if bf16 else "fp32"),
               steps=len(times), steps_wanted=a.steps, first_step_s=times[0],
               median_step_s=statistics.median(later), last_step_s=times[-1],
               peak_rss_bytes=rss_sum,
               torch=torch.__version__)
    if world > 1:
        res.update(ranks=world, peak_rss_rank_max_bytes=rss_max)
    res["samples_per_s"] = B * world / res["median_step_s"]
    if t_opt:
        res["optimizer_s"] = statistics.median(t_opt[1:] or t_opt)
    print(json.dumps(res), flush=True)
    return 0


# ----------------------------------------------------------------------------------------------
# The parent

def save_json(path, record, complete):
    """record, with "complete", written to path through a temporary file and a rename, so a
    reader (or a stopped run) finds the last whole record, never a partial one."""
    tmp = path + ".part"
    with open(tmp, "w") as f:
        json.dump(dict(record, complete=complete), f, indent=1)
    os.replace(tmp, path)


def last_json(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def pinned(cmd, cores):
    """cmd on these cores only (taskset; --jobs), or as it is (cores None): its children, the
    threads of bench_step or torch and mpirun's ranks, inherit the mask."""
    return cmd if cores is None else ["taskset", "-c", ",".join(map(str, cores))] + cmd


def steal_seconds():
    """This whole guest's stolen time so far, in seconds: the 8th value of /proc/stat's cpu
    line, time the hypervisor ran something else while a vCPU here wanted to run. None where
    /proc/stat has no such value."""
    try:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def machine_probe(build, threads, quick, cores=None):
    """How fast this machine's cores are right now: the fp32 GFLOP/s of bench_gemm's 1024 square,
    its median call over 0.5 s (--quick: 0.05 s) for each fp32 route, the better route's, on
    `threads` threads (on `cores` when given), under the --isa cap. On a quiet machine it reads
    the same before and after a run; a neighbour on the host (a busy SMT sibling, two vCPUs
    moved onto one core) reads lower, often without any steal time. None when bench_gemm
    fails."""
    cmd = pinned([os.path.join(build, "tests", "bench_gemm"), "--only", "square 1024", "--median",
                  "--seconds", "0.05" if quick else "0.5"], cores)
    p = subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS=str(threads)),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got = [float(m.group(1)) for m in re.finditer(r"#\s+\S+ fp32\s+([0-9.]+) GFLOP/s", p.stdout)]
    return max(got) if p.returncode == 0 and got else None


def probed(probe, go):
    """go()'s (result or None, a note), run between two readings of probe (a function of no
    arguments giving machine_probe's GFLOP/s; None: go() alone): a result then holds
    "machine", both readings and the steal seconds during go(), what a reader needs to judge
    whether two runs compared saw the same machine."""
    if not probe:
        return go()
    before, steal0 = probe(), steal_seconds()
    res, note = go()
    if res:
        steal1 = steal_seconds()
        res["machine"] = dict(probe_gflops_before=before, probe_gflops_after=probe(),
                              steal_s=steal1 - steal0 if None not in (steal0, steal1) else None)
    return res, note


def machine_lines(runs):
    """The "# machine:" lines under a table: per (label, result) run that has probed()'s
    readings, the GEMM probe before and after it and the steal seconds during it."""
    out = []
    for label, res in runs:
        m = (res or {}).get("machine")
        if m:
            out.append("# machine: %s: GEMM probe %s before, %s after (GFLOP/s), steal %s s" % (
                label, fmt(m["probe_gflops_before"], "%.1f"), fmt(m["probe_gflops_after"], "%.1f"),
                fmt(m["steal_s"], "%.1f")))
    if out:
        out.insert(0, "# machine during each run (scripts/bench_side_by_side.py machine_probe): "
                      "on a quiet machine the probes read alike; lower ones mean a busy host")
    return out


def run(cmd, env, timeout, label, cores=None):
    """Runs cmd (on `cores` when given); returns (json result or None, a note)."""
    cmd = pinned(cmd, cores)
    full_env = dict(os.environ)
    full_env.update(env)
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "did not finish within %d s (killed)" % timeout
    sys.stderr.write(p.stderr[-2000:])
    res = last_json(p.stdout)
    if p.returncode != 0 or res is None or "median_step_s" not in res:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return None, "failed (exit %d after %.0f s): %s" % (p.returncode, time.time() - t0, tail)
    note = ""
    if res.get("steps_wanted", res.get("steps")) != res.get("steps"):
        note = "stopped after %d of %d steps: the next would pass the time budget" % (
            res["steps"], res["steps_wanted"])
    print("  %-5s %-14s %s: %.3f s/step" % (res["impl"], res["precision"], label,
                                           res["median_step_s"]), file=sys.stderr)
    return res, note


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def gemm_peaks(build, quick, threads):
    """Machine GEMM peak from tests/bench_gemm.c: per route, the fastest call over every product
    of at least 1 GFLOP it runs (the model's Linear shapes and the squares; --quick: the 1024
    square only), GFLOP/s by route and the product that reached it."""
    cmd = [os.path.join(build, "tests", "bench_gemm")] + (["--only", "square 1024"] if quick else [])
    p = subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS=str(threads)),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peaks, where = {}, {}
    for line in p.stdout.splitlines():
        m = re.match(r"#\s+(openblas fp32|onednn fp32|onednn bf16 \(mixed\)|onednn bf16 \(bf16 operands\))"
                     r"\s+([0-9.]+) GFLOP/s\s+\((.*)\)", line)
        if m:
            peaks[m.group(1)] = float(m.group(2))
            where[m.group(1)] = " ".join(m.group(3).split())
    fp32 = max([v for k, v in peaks.items() if "fp32" in k] or [0.0])
    bf16 = max([v for k, v in peaks.items() if "bf16" in k] or [0.0])
    return dict(routes=peaks, at=where, fp32=fp32, bf16=bf16, best=max(fp32, bf16))


def fmt(x, spec):
    return spec % x if isinstance(x, (int, float)) else "—"


# ----------------------------------------------------------------------------------------------
# --scaling (issue 25 item 6): how the training step's cost grows with the work

# The grid: one table per dimension; every other dimension stays at the base point. Batch is
# the global batch (the ranks split it); "ranks" keeps the threads of the base point and divides
# them among the processes (1 x 2 threads vs 2 x 1 thread on a 2-core machine).
SCALING_DIMS = ("batch", "image", "text", "threads", "ranks")
SCALING_GRID = {
    "full": dict(config="bridgetower-base", base=dict(batch=8, image=288, text=40),
                 batch=[1, 2, 4, 8, 16, 32], image=[224, 288, 384], text=[40, 128],
                 threads=[1, 2], ranks=[1, 2]),
    "quick": dict(config="tiny", base=dict(batch=2, image=32, text=16),
                  batch=[1, 2], image=[32, 48], text=[16, 32], threads=[1, 2], ranks=[1, 2]),
}


def point_key(pt):
    """A grid point's (batch, image, text, threads, ranks): the same in every table it is in."""
    return tuple(pt[d] for d in SCALING_DIMS)


def scaling_points(grid, threads, only):
    """[(dim, value, point)] in table order; point = dict(batch, image, text, threads, ranks)
    (threads per process). only: {dim: [values] or None} (--only), empty = everything."""
    out = []
    for dim in SCALING_DIMS:
        if only and dim not in only:
            continue
        # threads: the grid's, and --threads (the base point's, shared with the other tables)
        for v in sorted(set(grid[dim]) | {threads}) if dim == "threads" else grid[dim]:
            if only and only[dim] and v not in only[dim]:
                continue
            pt = dict(grid["base"], threads=threads, ranks=1)
            if dim == "ranks":
                pt.update(ranks=v, threads=max(1, threads // v))
            else:
                pt[dim] = v
            out.append((dim, v, pt))
    return out


def point_label(dim, v, pt):
    if dim == "ranks":
        return "%d x %d thread%s" % (v, pt["threads"], "s" if pt["threads"] > 1 else "")
    if dim == "threads":
        return "%d thread%s" % (v, "s" if v > 1 else "")
    return {"batch": "batch %d", "image": "image %d", "text": "text %d"}[dim] % v


def table_caption(dim, base, threads):
    fixed = [("batch %d", base["batch"]), ("image %d", base["image"]), ("text %d", base["text"])]
    fixed = [f % v for (f, v), d in zip(fixed, ("batch", "image", "text")) if d != dim]
    if dim == "ranks":
        return "ranks: %d threads in all (%s, global batch %d split over the ranks)" % (
            threads, ", ".join(fixed[1:]), base["batch"])
    if dim != "threads":
        fixed.append("%d threads" % threads)
    return "%s (%s, 1 process)" % (dim, ", ".join(fixed))


def cpu_has_native_bf16(isa):
    """Whether torch 1.13's oneDNN 2.6 runs bf16 products natively here: AVX512-BF16 or AMX on
    this CPU, and no --isa cap below that class."""
    if isa in ("avx512", "avx2"):
        return False
    flags = cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def scaling_precisions(choice, info, isa):
    """(bt precision, twin precision, why) for --scaling-precision."""
    if choice in ("fp32", "bf16"):
        return choice, choice, "--scaling-precision %s" % choice
    bt_native = re.search(r"^gemm bf16 choice: native\b", info, re.M) is not None
    # the twin's autocast products are oneDNN 2.6's native bf16 ones (torch 1.13 bundles it):
    # where bt's start-up timing of the same library found them slower than fp32 (the Xeon
    # model 207 without AMX of session 30: the twin's bf16 step 1.4x its fp32 one), fp32 is
    # the twin's best too
    cpu_native = cpu_has_native_bf16(isa)
    tw_native = cpu_native and bt_native
    return ("bf16" if bt_native else "fp32", "bf16" if tw_native else "fp32",
            "best on this machine: bt %s (bt-forward --info: gemm bf16 choice %s), twin %s (%s)"
            % ("bf16" if bt_native else "fp32", "native" if bt_native else "not native",
               "bf16 autocast" if tw_native else "fp32",
               "the CPU has AVX512-BF16/AMX" if tw_native else
               "the CPU has AVX512-BF16/AMX, but oneDNN 2.6's bf16 products run slower than "
               "fp32 here" if cpu_native else "no native bf16 on this CPU%s"
               % (" class (--isa %s)" % isa if isa != "native" else "")))


def free_port():
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def run_twin_ranks(cmd, env, ranks, timeout, label, cores=None):
    """The twin's DistributedDataParallel job: `ranks` local processes of cmd with torchrun's
    environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) over gloo on the
    loopback (all on `cores` when given, as torchrun binds none); rank 0's JSON line is the
    job's. Returns (result or None, a note), as run()."""
    cmd = pinned(cmd, cores)
    port = str(free_port())
    procs = []
    for r in range(ranks):
        e = dict(os.environ, **env)
        e.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=port, GLOO_SOCKET_IFNAME="lo")
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    t0 = time.time()
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=max(1, timeout - (time.time() - t0))))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
            p.communicate()
        return None, "did not finish within %d s (killed)" % timeout
    sys.stderr.write(outs[0][1][-2000:])
    res = last_json(outs[0][0])
    bad = [(r, p.returncode, e) for r, (p, (o, e)) in enumerate(zip(procs, outs)) if p.returncode]
    if bad or res is None or "median_step_s" not in res:
        r, rc, err = bad[0] if bad else (0, 0, outs[0][1])
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return None, "failed (rank %d exit %d after %.0f s): %s" % (r, rc, time.time() - t0, tail)
    note = ""
    if res["steps"] != res["steps_wanted"]:
        note = "stopped after %d of %d steps: the next would pass the time budget" % (
            res["steps"], res["steps_wanted"])
    print("  %-5s %-14s %s: %.3f s/step" % (res["impl"], res["precision"], label,
                                           res["median_step_s"]), file=sys.stderr)
    return res, note


def twin_python_ready(a, notes):
    """Whether the twin runs: not --no-twin, and --python imports torch (else a note says why)."""
    if a.no_twin:
        return False
    if subprocess.run([a.python, "-c", "import torch"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode == 0:
        return True
    notes.append("the twin did not run: %s cannot import torch " % a.python +
                 "(Debian's python3-torch: bash scripts/install_deps.sh --python)")
    return False


def record_head(a, grid, steps, prec_bt, prec_tw, why):
    """What makes two --scaling runs' points comparable (and --resume checks)."""
    return dict(mode="scaling", config=grid["config"], steps=steps, threads=a.threads,
                precision=dict(bt=prec_bt, twin=prec_tw, why=why), base=grid["base"], isa=a.isa,
                isa_env=a.run_env, jobs=a.jobs)


def resumed_points(a, head):
    """--resume: (points, notes) of --json-out's unfinished record, or None (the reason
    printed)."""
    def refuse(why):
        print("bench_side_by_side: --resume %s: %s" % (a.json_out, why), file=sys.stderr)
    try:
        with open(a.json_out) as f:
            rec = json.load(f)
    except FileNotFoundError:
        print("# resume: %s does not exist yet: every point runs" % a.json_out)
        return [], []
    except ValueError as e:
        return refuse("not JSON (%s)" % e)
    if rec.get("complete") is not False:
        return refuse("the record is %s, not an unfinished one (\"complete\": false)"
                      % ("complete" if rec.get("complete") else "not a record of this script"))
    for key, want in head.items():
        if rec.get(key) != want:
            return refuse("its %s is %s, this run's %s" % (key, json.dumps(rec.get(key)),
                                                           json.dumps(want)))
    def ended(cell):  # a point whose runs failed (or never started) runs again
        return (cell.get("bt") or cell.get("bt_note") not in (None, "failed")) and \
            cell.get("twin_note") != "failed"
    return [c for c in rec.get("points", []) if ended(c)], rec.get("notes", [])


def run_points_concurrently(a, todo, base_key, plan, run_point, run_impl, done, record, lock,
                            notes):
    """--jobs J > 1: the points of `todo` (in order) J at a time, each on its own cores
    (threads x ranks of them, taskset) while its memory estimate fits beside those running.
    Each point's plan is what it would be alone: decided against the MemAvailable at the
    start. Sharing the machine's caches and memory bandwidth slows a point down; to measure by
    how much, the base point (base_key, when it is in todo) runs first alone, then once more
    among the others (the first of them to start), and a note gives both: the tables hold the
    run alone."""
    cpus = sorted(os.sched_getaffinity(0))
    avail = mem_available()
    cond = threading.Condition(lock)
    held = dict(cores=list(cpus), bytes=0, running=0)
    workers = []

    def start(pl, body):
        """Waits for a free one of the J places, the plan's cores and its memory (whatever
        there is, when it needs more than the machine has and nothing else runs), then runs
        body(cores) in a thread."""
        with cond:
            want = min(pl["cores"], len(cpus))
            while held["running"] and (held["running"] >= a.jobs or len(held["cores"]) < want
                                       or held["bytes"] + pl["need"] > 0.9 * avail):
                cond.wait()
            cores, held["cores"] = held["cores"][:want], held["cores"][want:]
            held["bytes"] += pl["need"]
            held["running"] += 1

        def work():
            try:
                body(cores)
            finally:
                with cond:
                    held["cores"] = sorted(held["cores"] + cores)
                    held["bytes"] -= pl["need"]
                    held["running"] -= 1
                    if a.json_out:
                        save_json(a.json_out, record(), False)
                    cond.notify_all()
        w = threading.Thread(target=work)
        w.start()
        workers.append(w)

    base = [t for t in todo if point_key(t[2]) == base_key][:1]
    probe = None
    if base:
        with lock:
            probe = plan(*base[0], avail)
        if probe:
            start(probe, lambda cores: run_point(probe, cores))
            workers.pop().join()  # alone
    else:
        notes.append("no contention probe: the base point did not run in this invocation")
    if probe:
        among = {}

        def probe_again(cores):
            for who in ("bt", "twin"):
                if probe[who]:
                    res, _ = run_impl(probe, who, cores, probe["label"] + " (again, among others)")
                    if res:
                        among[who] = res["median_step_s"]
        start(probe, probe_again)
    for dim, v, pt in todo:
        with lock:
            if point_key(pt) in done:  # a point shared by two tables runs once
                continue
            if a.json_out:
                save_json(a.json_out, record(), False)
            pl = plan(dim, v, pt, avail)
        if pl:
            start(pl, lambda cores, pl=pl: run_point(pl, cores))
    for w in workers:
        w.join()
    if probe:
        cell = done[probe["key"]]
        for who in ("bt", "twin"):
            alone = cell.get(who, {}).get("median_step_s")
            if alone and who in among:
                notes.append("contention (--jobs %d): the base point's %s took %.3f s/step alone "
                             "and %.3f s/step among the other points (%+.0f%%)" % (
                                 a.jobs, who, alone, among[who], 100 * (among[who] / alone - 1)))
            elif probe[who]:
                notes.append("contention (--jobs %d): the base point's %s did not finish both "
                             "runs: not measured" % (a.jobs, who))


def scaling_main(a, bench_step, info):
    grid = SCALING_GRID["quick" if a.quick else "full"]
    cdir = os.path.join(ROOT, "configs", grid["config"])
    # 5 (quick: 3): the median of the 4 later steps stays robust to one slow warm-up step
    # (docs/benchmarks.md "The twin's warm-up on this VM")
    steps = a.steps or (3 if a.quick else 5)
    only = {}
    for o in a.only or []:
        dim, _, vals = o.partition("=")
        if dim not in SCALING_DIMS:
            print("bench_side_by_side: --only %s: the dimension must be one of %s"
                  % (o, ", ".join(SCALING_DIMS)), file=sys.stderr)
            return 2
        try:
            only[dim] = [int(v) for v in vals.split(",")] if vals else None
        except ValueError:
            print("bench_side_by_side: --only %s: expected DIM or DIM=N[,N...]" % o, file=sys.stderr)
            return 2
    points = scaling_points(grid, a.threads, only)
    if not points:
        print("bench_side_by_side: --only %s selects no point of the %s grid (%s)" % (
            " --only ".join(a.only), "--quick" if a.quick else "full", "; ".join(
                "%s: %s" % (d, ", ".join(map(str, grid[d]))) for d in SCALING_DIMS)), file=sys.stderr)
        return 2
    prec_bt, prec_tw, why = scaling_precisions(a.scaling_precision, info, a.isa)
    notes = []
    twin = twin_python_ready(a, notes)
    mpirun = shutil.which("mpirun")
    print("# scaling: the training step (forward, ITC loss, backward, clip, AdamW) of %s; bt %s, "
          "twin %s (%s); first step and median of the later ones, %d steps a point"
          % (grid["config"], prec_bt, "bf16 autocast" if prec_tw == "bf16" else prec_tw, why, steps))
    if a.jobs > 1:
        print("# --jobs %d: up to %d points at a time, each on its own cores (taskset), the base "
              "point first alone and once more among the others (the note \"contention\")"
              % (a.jobs, a.jobs))
    done = {}  # (batch, image, text, threads, ranks) -> the point's results
    if a.resume:  # (the twin's memory estimate starts again from its 2x, as in a new run)
        resumed = resumed_points(a, record_head(a, grid, steps, prec_bt, prec_tw, why))
        if resumed is None:
            return 2
        kept, kept_notes = resumed
        notes[:0] = [n for n in kept_notes if n not in notes]
        for cell in kept:
            pt = cell["point"]
            done[point_key(pt)] = cell
        print("# resumed: %d point(s) kept from %s" % (len(kept), a.json_out))
    twin_fit = None  # (bt's fp32 activation bytes, twin RSS per such byte) of the largest twin run
    failed = False
    tables = {}  # dimension -> [(value, key)], in the grid's order
    for dim, v, pt in points:
        key = point_key(pt)
        tables.setdefault(dim, []).append((v, key))
    lock = threading.RLock()  # --jobs: done, notes, twin_fit, failed and the JSON file

    def record():
        return dict(record_head(a, grid, steps, prec_bt, prec_tw, why),
                    tables={d: [dict(value=v, **dict(zip(SCALING_DIMS, k))) for v, k in rows]
                            for d, rows in tables.items()},
                    points=list(done.values()), notes=notes, bt_info=info)

    def plan(dim, v, pt, avail):
        """What one point runs, decided from the memory estimates against `avail` bytes: a
        dict with the point's label, cores (threads x ranks), the bytes it needs at most, its
        bt command (None: not run) and its twin command (None: not run), or None when neither
        runs; the skips are in the point's cell and the notes. Under the lock."""
        nonlocal failed
        key = point_key(pt)
        cell = done[key] = dict(point=pt)
        B, R, T, th, nr = key
        label = "%s %s (batch %d, image %d, text %d, %d x %d threads)" % (
            grid["config"], point_label(dim, v, pt), B, R, T, nr, th)
        if B % nr:
            cell["bt_note"] = cell["twin_note"] = "skipped (batch %d over %d ranks)" % (B, nr)
            notes.append("%s: skipped: batch %d does not split over %d ranks" % (label, B, nr))
            return None
        b = B // nr
        geo = ["--config", cdir, "--batch", str(b), "--text", str(T), "--image", str(R)]

        def estimate(prec, ckpt):
            out = subprocess.run([bench_step] + geo + ["--precision", prec, "--flops-only", "--estimate"]
                                 + (["--checkpoint"] if ckpt else []), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            e = last_json(out.stdout)
            if e is None:
                raise RuntimeError((out.stderr.strip().splitlines() or ["no output"])[-1])
            return e
        try:
            e_bt, e_ck, e_tw = estimate(prec_bt, 0), estimate(prec_bt, 1), estimate("fp32", 0)
        except RuntimeError as err:
            notes.append("%s: bench_step --estimate failed: %s" % (label, err))
            failed = True
            return None
        params = e_bt["param_count"]
        # bt per process as in the plain mode (main): fp32 weights, gradients, two AdamW
        # moments and a bf16 shadow, plus bench_step's activation bytes
        need_bt = nr * (18 * params + e_bt["activation_bytes"])
        need_ck = nr * (18 * params + e_ck["activation_bytes"])
        # the twin: its own RSS beyond the weights, gradients and moments, per byte of bt's
        # fp32 activation estimate, as measured at the point with the most activations so far
        # in this run (x1.25 for what that ratio does not follow, e.g. PyTorch's attention
        # probabilities growing as R^4); the plain mode's 2x until a twin point has run
        per_act = 1.25 * twin_fit[1] if twin_fit else 2.0
        need_tw = nr * (16 * params + per_act * e_tw["activation_bytes"])
        ckpt = need_bt > 0.9 * avail and need_ck <= 0.9 * avail
        if ckpt:
            notes.append("%s: bt with gradient checkpointing (--checkpoint): the full activations "
                         "need about %.1f GiB, %.1f GiB available" % (label, need_bt / 2**30, avail / 2**30))
        cell["bt_checkpoint"] = ckpt
        pl = dict(key=key, label=label, cores=th * nr, need=0, bt=None, twin=None, e_tw=e_tw,
                  params=params)
        # bt
        need = need_ck if ckpt else need_bt
        if need > 0.9 * avail:
            cell["bt_note"] = "skipped (memory)"
            notes.append("%s: bt skipped: needs about %.1f GiB, %.1f GiB available"
                         % (label, need / 2**30, avail / 2**30))
        elif nr > 1 and not mpirun:
            cell["bt_note"] = "skipped (no mpirun)"
            notes.append("%s: bt skipped: mpirun not found (Debian's openmpi-bin)" % label)
        else:
            cmd = [bench_step] + geo + ["--precision", prec_bt, "--steps", str(steps)] + \
                (["--checkpoint"] if ckpt else [])
            if nr > 1:  # as tests/test_dist.c starts bt: root allowed, no binding, threads set
                cmd = [mpirun, "-np", str(nr), "--allow-run-as-root", "--oversubscribe",
                       "--bind-to", "none", "-x", "OMP_NUM_THREADS=%d" % th] + cmd
            pl["bt"] = cmd
            pl["need"] = need
        # the twin
        if not twin:
            cell["twin_note"] = "not run"
        elif need_tw > 0.9 * avail:
            cell["twin_note"] = "skipped (memory)"
            notes.append("%s: twin skipped: needs about %.1f GiB (%s), %.1f GiB available"
                         % (label, need_tw / 2**30, "%.2f x bt's activations, from its run at %.1f GB of "
                            "them" % (per_act, twin_fit[0] / 1e9) if twin_fit else "2 x bt's activations",
                            avail / 2**30))
        else:
            pl["twin"] = [a.python, os.path.abspath(__file__), "--twin-worker", "--config", cdir,
                          "--batch", str(b), "--text", str(T), "--image", str(R), "--mode", "train",
                          "--precision", prec_tw, "--steps", str(steps), "--threads", str(th),
                          "--budget", str(a.budget)]
            pl["need"] = max(pl["need"], need_tw)
        return pl if pl["bt"] or pl["twin"] else None

    def run_impl(pl, who, cores, label):
        """A plan's bt or twin run (who), on `cores` when given: (result or None, a note)."""
        th, nr = pl["key"][3], pl["key"][4]
        print("# running %s %s %s ..." % (label, who, prec_bt if who == "bt" else prec_tw),
              file=sys.stderr, flush=True)
        probe = lambda: machine_probe(a.build, th * nr, a.quick, cores)  # the point's cores
        if who == "bt":
            env = dict(TWIN_ENV if a.same_env else {}, OMP_NUM_THREADS=str(th))
            return probed(probe, lambda: run(pl["bt"], env, max(a.budget, 3600), label, cores))
        env = dict(TWIN_ENV, OMP_NUM_THREADS=str(th))
        if nr > 1:
            return probed(probe, lambda: run_twin_ranks(pl["twin"], env, nr, a.budget + 300,
                                                        label, cores))
        return probed(probe, lambda: run(pl["twin"], env, a.budget + 300, label, cores))

    def run_point(pl, cores):
        """Runs a plan's bt, then its twin (on `cores` when given), and records both."""
        nonlocal failed, twin_fit
        key, label = pl["key"], pl["label"]
        cell = done[key]
        if pl["bt"]:
            res, note = run_impl(pl, "bt", cores, label)
            with lock:
                if res:
                    cell["bt"] = res
                else:
                    cell["bt_note"] = "failed"
                    failed = True
                if note:
                    notes.append("%s: bt %s" % (label, note))
        if not pl["twin"]:
            return
        res, note = run_impl(pl, "twin", cores, label)
        with lock:
            if res and res["steps"] != res["steps_wanted"]:
                cell["twin_stopped"] = res  # a stopped twin is reported as stopped, not as a number
                cell["twin_note"] = "stopped after %d of %d steps (budget %d s)" % (
                    res["steps"], steps, a.budget)
            elif res:
                cell["twin"] = res
                act = pl["e_tw"]["activation_bytes"]
                if not twin_fit or act > twin_fit[0]:
                    rank_rss = res.get("peak_rss_rank_max_bytes", res["peak_rss_bytes"])
                    twin_fit = (act, max(0.0, (rank_rss - 16 * pl["params"]) / act))
            else:
                cell["twin_note"] = ("failed" if not note.startswith("did not finish")
                                     else "stopped (killed)")
                failed = failed or cell["twin_note"] == "failed"
            if note:
                notes.append("%s: twin %s" % (label, note))

    todo = [(dim, v, pt) for dim, v, pt in points if point_key(pt) not in done]
    if a.jobs == 1:
        for dim, v, pt in todo:
            if point_key(pt) in done:  # a point shared by two tables runs once
                continue
            if a.json_out:  # the points so far, before this one starts
                save_json(a.json_out, record(), False)
            pl = plan(dim, v, pt, mem_available())
            if pl:
                run_point(pl, None)
    else:
        run_points_concurrently(a, todo, point_key(dict(grid["base"], threads=a.threads, ranks=1)),
                                plan, run_point, run_impl, done, record, lock, notes)

    for dim, rows in tables.items():
        print("\n### %s\n" % table_caption(dim, grid["base"], a.threads))
        print("| point | bt s/step | twin s/step | bt samples/s | twin samples/s | bt/twin speed ratio "
              "| bt peak RSS GB | twin peak RSS GB | RSS ratio | bt attention share |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for v, key in rows:
            c = done[key]
            bt, tw = c.get("bt"), c.get("twin")
            name = point_label(dim, v, c["point"]) + (" (bt: --checkpoint)" if c.get("bt_checkpoint") else "")
            def step(r, why):
                return "%.3f (first %.3f)" % (r["median_step_s"], r["first_step_s"]) if r else why or "—"
            both = bt is not None and tw is not None
            print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                name, step(bt, c.get("bt_note")), step(tw, c.get("twin_note")),
                fmt(bt["samples_per_s"] if bt else None, "%.3f"),
                fmt(tw["samples_per_s"] if tw else None, "%.3f"),
                fmt(bt["samples_per_s"] / tw["samples_per_s"] if both else None, "%.2f"),
                fmt(bt["peak_rss_bytes"] / 1e9 if bt else None, "%.2f"),
                fmt(tw["peak_rss_bytes"] / 1e9 if tw else None, "%.2f"),
                fmt(bt["peak_rss_bytes"] / tw["peak_rss_bytes"] if both else None, "%.2f"),
                fmt(100 * bt["attention_s"] / bt["median_step_s"] if bt and "attention_s" in bt else None,
                    "%.0f%%")))
    print("\n# s/step: median of the steps after the first (first: the first step alone); samples/s: "
          "the global batch over that median; peak RSS: the process's, or the ranks' summed; "
          "bt attention share: bt's attention kernels (scores, softmax, dropout, value product, "
          "forward and backward; rank 0's under mpirun) over its whole step")
    for n in notes:
        print("# note: " + n)
    runs, seen = [], set()  # each point once (the base point is in several tables)
    for dim, rows in tables.items():
        for v, key in rows:
            if key not in seen:
                seen.add(key)
                runs += [(point_label(dim, v, done[key]["point"]) + " " + who, done[key].get(who))
                         for who in ("bt", "twin")]
    for line in machine_lines(runs):
        print(line)
    if a.json_out:
        save_json(a.json_out, record(), True)
    if failed:
        return 1
    if not twin and not a.no_twin:
        return 77  # bt's half ran; the twin's was not checked (meson: skipped, not passed)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--twin-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="train", help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--text", type=int, default=40, help=argparse.SUPPRESS)
    ap.add_argument("--image", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="bt build directory")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both (default: all cores)")
    ap.add_argument("--quick", action="store_true", help="tiny config, 3 steps: a smoke test")
    ap.add_argument("--steps", type=int, default=None, help="steps per run (first one cold; default 6)")
    ap.add_argument("--budget", type=int, default=900, help="seconds a twin mode may take (default 900)")
    ap.add_argument("--no-large", action="store_true", help="skip the large model")
    ap.add_argument("--no-twin", action="store_true", help="bt only")
    ap.add_argument("--same-env", action="store_true",
                    help="run bt in the twin's tuned environment too (default: bt gets only OMP_NUM_THREADS)")
    ap.add_argument("--checkpointing-rows", action="store_true",
                    help="also run bt's training step with gradient checkpointing (bench_step "
                         "--checkpoint) where the full step runs: the memory/time trade-off")
    ap.add_argument("--isa", choices=sorted(ISA_CLASSES), default="native",
                    help="run both as on a CPU of this class (capped ISA; default: this CPU's own)")
    ap.add_argument("--json-out", help="write every result here")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="the Python that runs the twin (default /usr/bin/python3, Debian's torch)")
    ap.add_argument("--scaling", action="store_true",
                    help="the training step against batch, image size, text length, threads and "
                         "ranks (issue 25 item 6; --quick: the tiny config's reduced grid)")
    ap.add_argument("--scaling-precision", choices=("best", "fp32", "bf16"), default="best",
                    help="--scaling: each in its best precision here (default), or both in this one")
    ap.add_argument("--resume", action="store_true",
                    help="--scaling: keep the points an unfinished --json-out file holds and run "
                         "only the rest (the same grid, steps, threads, precisions, --isa and --jobs)")
    ap.add_argument("--jobs", type=int, default=1, metavar="J",
                    help="--scaling: run J points at a time, each on its own cores (default 1)")
    ap.add_argument("--only", action="append", metavar="DIM[=N,...]",
                    help="--scaling: only this table (batch, image, text, threads, ranks), or only "
                         "these of its points; repeatable")
    a = ap.parse_args()
    if a.resume and not a.scaling:
        ap.error("--resume goes with --scaling (the side by side's runs are few: run it again)")
    if a.resume and not a.json_out:
        ap.error("--resume needs --json-out FILE, the record to go on from")
    if a.jobs < 1:
        ap.error("--jobs %d: expected 1 or more" % a.jobs)
    if a.jobs > 1 and not a.scaling:
        ap.error("--jobs goes with --scaling (the side by side compares runs on a quiet machine)")
    if a.jobs > 1 and not shutil.which("taskset"):
        ap.error("--jobs %d needs taskset (Debian's util-linux) to give each point its cores"
                 % a.jobs)
    if a.twin_worker:
        a.steps = a.steps or 4
        return twin_worker(a)

    os.environ.update(ISA_CLASSES[a.isa])  # every child below inherits the cap
    a.run_env = dict(ISA_CLASSES[a.isa])
    core = openblas_core_fix() if a.isa == "native" else None
    if core:
        os.environ["OPENBLAS_CORETYPE"] = a.run_env["OPENBLAS_CORETYPE"] = core
    bench_step = os.path.join(a.build, "tests", "bench_step")
    if not os.path.exists(bench_step):
        print("bench_side_by_side: %s not found: build bt first (meson setup %s && ninja -C %s)"
              % (bench_step, a.build, a.build), file=sys.stderr)
        return 1
    threads = str(a.threads)
    info = subprocess.run([os.path.join(a.build, "src", "model", "bt-forward"), "--info"],
                          stdout=subprocess.PIPE, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS=threads)).stdout
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("# machine: %s, %d cores, %.1f GiB available; %d threads for both"
          % (cpu, os.cpu_count(), mem_available() / 2**30, a.threads))
    if a.isa != "native":
        print("# CPU class emulated (--isa %s): %s, for bt and the twin alike"
              % (a.isa, " ".join("%s=%s" % kv for kv in ISA_CLASSES[a.isa].items())))
    if core:
        print("# OpenBLAS picked its Prescott (SSE3) kernels on this CPU (a model it does not "
              "know): OPENBLAS_CORETYPE=%s, its kernels for this CPU's flags, for every run "
              "(the twin's fp32 products and the GEMM peak's OpenBLAS column)" % core)
    for line in info.splitlines()[1:]:
        print("#   bt " + line)
    print("# twin environment: %s; bt environment: %s" % (
        " ".join("%s=%s" % kv for kv in TWIN_ENV.items()),
        "the same" if a.same_env else "as inherited (OMP_NUM_THREADS only; bench_step waits passively as bt's tools do)"))
    if a.scaling:
        return scaling_main(a, bench_step, info)

    if a.quick:
        setups = [("tiny", 4, 16)]
        steps = a.steps or 3
    else:
        setups = [("bridgetower-base", 8, 40)]
        if not a.no_large:
            setups.append(("bridgetower-large-itm-mlm-itc", 8, 40))
        # 6 steps a run: the median of the 5 after the cold first one holds while two of them
        # are still warming up. The twin's fp32 training was still warming up in its steps 1
        # and 2 on the Xeon model 207 (session 31: 27.6 and 22.3 s, then 17.5-20.3 s). With 4
        # training steps (the default before) that median is the warm-up's 22.3 s; session
        # 30's 5 steps read 22.6 s against a steady 17.7 s.
        steps = a.steps or 6

    print("# GEMM peak (tests/bench_gemm.c, best call over its products >= 1 GFLOP) ...", file=sys.stderr)
    peak = gemm_peaks(a.build, a.quick, a.threads)
    print("# GEMM peak measured now: fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s (%s)"
          % (peak["fp32"], peak["bf16"], ", ".join("%s %.1f at %s" % (k, v, peak["at"].get(k, "?"))
                                                   for k, v in peak["routes"].items())))

    results, notes = [], []
    twin = twin_python_ready(a, notes)

    def record():
        return dict(peak=peak, results=results, notes=notes, bt_info=info, isa=a.isa,
                    isa_env=a.run_env)
    for name, B, T in setups:
        cdir = os.path.join(ROOT, "configs", name)
        est = last_json(subprocess.run([bench_step, "--config", cdir, "--batch", str(B), "--text", str(T),
                                        "--flops-only", "--estimate"], stdout=subprocess.PIPE,
                                       text=True).stdout)
        params = est["param_count"]
        # fp32 weights, gradients and two AdamW moments (+ a bf16 shadow) and the activations
        need_bt = 16 * params + 2 * params + est["activation_bytes"]
        need_twin = 16 * params + 2 * est["activation_bytes"]  # estimate: twin keeps more
        # bt's training step with gradient checkpointing (bench_step --checkpoint), used when the
        # full activations do not fit (docs/benchmarks.md "Memory")
        est_ck = last_json(subprocess.run([bench_step, "--config", cdir, "--batch", str(B), "--text", str(T),
                                           "--flops-only", "--estimate", "--checkpoint"],
                                          stdout=subprocess.PIPE, text=True).stdout)
        need_bt_ck = 16 * params + 2 * params + est_ck["activation_bytes"]
        avail = mem_available()
        for mode in ("train", "infer"):
            flops = est["flops_per_step"] * (1 if mode == "train" else 1 / 3)
            runs = [("bt", "fp32", 0), ("bt", "bf16", 0), ("twin", "fp32", 0), ("twin", "bf16", 0)]
            if a.checkpointing_rows and mode == "train" and need_bt <= 0.9 * avail:
                runs[2:2] = [("bt", "fp32", 1), ("bt", "bf16", 1)]
            for impl, prec, want_ckpt in runs:
                label = "%s %s %s %s%s" % (name, mode, impl, prec, " checkpointing" if want_ckpt else "")
                need = need_bt if impl == "bt" else need_twin
                ckpt = want_ckpt or (impl == "bt" and mode == "train" and need > 0.9 * avail
                                     and need_bt_ck <= 0.9 * avail)
                if ckpt and not want_ckpt:
                    need = need_bt_ck
                    notes.append("%s: run with gradient checkpointing (--checkpoint): the full activations "
                                 "need about %.1f GiB, %.1f GiB available" % (label, need_bt / 2**30, avail / 2**30))
                if mode == "train" and need > 0.9 * avail:
                    notes.append("%s: skipped: needs about %.1f GiB, %.1f GiB available"
                                 % (label, need / 2**30, avail / 2**30))
                    continue
                if impl == "twin" and not twin:
                    continue
                if impl == "bt":
                    cmd = [bench_step, "--config", cdir, "--batch", str(B), "--text", str(T), "--mode", mode,
                           "--precision", prec, "--steps", str(steps)] + (["--checkpoint"] if ckpt else [])
                    env = dict(TWIN_ENV if a.same_env else {}, OMP_NUM_THREADS=threads)
                    timeout = max(a.budget, 3600)
                else:
                    cmd = [a.python, os.path.abspath(__file__), "--twin-worker", "--config", cdir,
                           "--batch", str(B), "--text", str(T), "--mode", mode, "--precision", prec,
                           "--steps", str(steps), "--threads", threads, "--budget", str(a.budget)]
                    env = dict(TWIN_ENV, OMP_NUM_THREADS=threads)
                    timeout = a.budget + 300  # + model construction and init
                print("# running %s ..." % label, file=sys.stderr, flush=True)
                res, note = probed(lambda: machine_probe(a.build, int(threads), a.quick),
                                   lambda: run(cmd, env, timeout, label))
                if note:
                    notes.append("%s: %s" % (label, note))
                if res:
                    res.update(config=name, mode=mode, B=B, T=T, flops_per_step=flops)
                    if res.get("memory") == "checkpoint":
                        res["precision"] += " (checkpointing)"
                    res["gflops"] = flops / res["median_step_s"] * 1e-9
                    res["share_fp32_peak"] = res["gflops"] / peak["fp32"] if peak["fp32"] else None
                    res["share_best_peak"] = res["gflops"] / peak["best"] if peak["best"] else None
                    res["first_over_steady"] = res["first_step_s"] / res["median_step_s"]
                    if res.get("optimizer_s") is not None:
                        res["optimizer_share"] = res["optimizer_s"] / res["median_step_s"]
                    results.append(res)
                if a.json_out:  # what is in so far
                    save_json(a.json_out, record(), False)

    versions = sorted({r["torch"] for r in results if r.get("torch")})
    if versions:  # the twin's PyTorch: Debian's 1.13 by default, another under --python
        print("\n# twin: PyTorch %s, run by %s" % (", ".join(versions), a.python))
    print("\n| model | path | impl | precision | first step s | step s (median) | samples/s | GFLOP/s "
          "| % fp32 peak | % best peak | optimizer+clip | peak RSS GB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["config"], r["mode"], r["impl"], r["precision"], fmt(r["first_step_s"], "%.2f"),
            fmt(r["median_step_s"], "%.3f"), fmt(r["samples_per_s"], "%.3f"), fmt(r["gflops"], "%.1f"),
            fmt(100 * r["share_fp32_peak"] if r["share_fp32_peak"] else None, "%.0f%%"),
            fmt(100 * r["share_best_peak"] if r["share_best_peak"] else None, "%.0f%%"),
            fmt(r.get("optimizer_s"), "%.3f s") + (fmt(100 * r["optimizer_share"], " (%.1f%%)")
                                                    if r.get("optimizer_share") else ""),
            fmt(r["peak_rss_bytes"] / 1e9, "%.2f")))

    for r in results:
        if r["impl"] == "bt" and "towers_fwd_s" in r:
            print("# bt %s %s %s step phases (median s): towers forward %.3f, cross forward %.3f, "
                  "losses %.3f, backward %.3f, optimizer + clip %.3f; arenas reserved before "
                  "the first step in %.3f s (bt_trainer_reserve, not in the first step)" % (
                      r["config"], r["mode"], r["precision"], r["towers_fwd_s"], r["cross_fwd_s"],
                      r["losses_s"], r["backward_s"], r["optimizer_s"], r.get("reserve_s", 0.0)))
    for r in results:
        if r["impl"] == "bt" and "gemm_s" in r:
            # forward (+ backward) split by kind of kernel (src/kernels/kernel_clock.h)
            passes = r["median_step_s"] - r.get("optimizer_s", 0.0) if r["mode"] == "train" \
                else r["median_step_s"]
            kinds = (("gemm", r["gemm_s"]), ("attention", r["attention_s"]),
                     ("memory-bound", r["memory_bound_s"]))
            print("# bt %s %s %s kernels (median s, share of the step less the optimizer): %s; "
                  "other %.3f" % (r["config"], r["mode"], r["precision"],
                                  ", ".join("%s %.3f (%.0f%%)" % (k, v, 100 * v / passes)
                                            for k, v in kinds),
                                  passes - sum(v for _, v in kinds)))
    print("\n# ratios (targets of issue 9 in brackets)")
    for name, _, _ in setups:
        for mode, target in (("train", 1.5), ("infer", 2.0)):
            rs = [r for r in results if r["config"] == name and r["mode"] == mode]
            bt = max((r for r in rs if r["impl"] == "bt"), key=lambda r: r["samples_per_s"], default=None)
            tw = max((r for r in rs if r["impl"] == "twin"), key=lambda r: r["samples_per_s"], default=None)
            if bt and tw:
                print("%s %s: bt best (%s) / twin best (%s) samples/s = %.3f [>= %.1f]"
                      % (name, mode, bt["precision"], tw["precision"], bt["samples_per_s"] / tw["samples_per_s"],
                         target))
                # A run still speeding up (allocator and caches warming) makes its median read
                # slow. 5%: beyond the few percent steps vary on a VM once steady.
                for r, side in ((tw, "high"), (bt, "low")):
                    last = r.get("last_step_s")
                    if last and last < 0.95 * r["median_step_s"]:
                        print("%s %s: note: %s %s was not steady: its last step (%.3f s) is %.0f%% "
                              "under its median (%.3f s), so the ratio reads %s; rerun with more "
                              "--steps" % (name, mode, r["impl"], r["precision"], last,
                                           100 * (1 - last / r["median_step_s"]),
                                           r["median_step_s"], side))
            if bt:
                print("%s %s: bt best achieved %.1f%% of the best GEMM peak [>= 75%% for train]; first step "
                      "%.2fx a steady one [<= 1.5]" % (name, mode, 100 * bt["share_best_peak"],
                                                       bt["first_over_steady"]))
                flops_run = bt.get("flops_run_per_step")
                if flops_run and peak["best"] and flops_run < bt["flops_per_step"]:
                    # bench_step: bt skips the last cross layer's non-CLS rows (docs/model.md)
                    print("%s %s: bt runs %.1f%% of the model's FLOPs (%.3e); over those it ran at "
                          "%.1f%% of the best GEMM peak"
                          % (name, mode, 100 * flops_run / bt["flops_per_step"], flops_run,
                             100 * flops_run * 1e-9 / bt["median_step_s"] / peak["best"]))
                if bt.get("optimizer_share") is not None:
                    print("%s %s: bt optimizer + clip %.1f%% of the step [<= 2%%]"
                          % (name, mode, 100 * bt["optimizer_share"]))
            if bt and bt.get("gemm_s") and peak["best"]:
                # What the same products allow at most: the step cut down to its GEMM seconds
                # (no attention, memory-bound or optimizer second left) bounds both ratios.
                g = bt["gemm_s"]
                print("%s %s: upper bound: bt's GEMMs alone take %.3f s of its %.3f s step; a step "
                      "of nothing else would reach %.0f%% of the best GEMM peak%s"
                      % (name, mode, g, bt["median_step_s"], 100 * bt["flops_per_step"] * 1e-9 / g / peak["best"],
                         ", %.2fx the twin best" % (tw["median_step_s"] / g) if tw else ""))
            if bt and tw and peak["best"]:
                # The machine's bound on the ratio: every FLOP bt runs, attention's included,
                # at the best GEMM peak, and nothing else in the step. A target above it cannot
                # be met on this machine, whatever bt's kernels do.
                flops = bt.get("flops_run_per_step") or bt["flops_per_step"]
                at_peak = flops * 1e-9 / peak["best"]
                print("%s %s: FLOP bound: bt's %.3e FLOPs take %.3f s at the best GEMM peak: at most "
                      "%.2fx the twin best on this machine" % (name, mode, flops, at_peak,
                                                               tw["median_step_s"] / at_peak))
            for prec_bt, prec_tw in (("fp32", "fp32"), ("bf16", "bf16-autocast")):
                b = next((r for r in rs if r["impl"] == "bt" and r["precision"] == prec_bt), None)
                t = next((r for r in rs if r["impl"] == "twin" and r["precision"] == prec_tw), None)
                if b and t and mode == "train":
                    print("%s %s %s: peak RSS bt / twin = %.2f [<= 0.7]"
                          % (name, mode, prec_bt, b["peak_rss_bytes"] / t["peak_rss_bytes"]))
                ck = next((r for r in rs if r["impl"] == "bt" and r["precision"] == prec_bt + " (checkpointing)"), None)
                if ck and t:
                    print("%s %s %s: with gradient checkpointing: peak RSS bt / twin = %.2f, samples/s "
                          "bt / twin = %.2f (the twin without checkpointing)"
                          % (name, mode, prec_bt, ck["peak_rss_bytes"] / t["peak_rss_bytes"],
                             ck["samples_per_s"] / t["samples_per_s"]))
                if b and t and mode == "infer":
                    print("%s %s %s: peak RSS bt / twin = %.2f"
                          % (name, mode, prec_bt, b["peak_rss_bytes"] / t["peak_rss_bytes"]))
    for n in notes:
        print("# note: " + n)
    for line in machine_lines([("%s %s %s %s" % (r["config"], r["mode"], r["impl"], r["precision"]), r)
                               for r in results]):
        print(line)
    if a.json_out:
        save_json(a.json_out, record(), True)
    if not results:
        return 1
    return 77 if not twin and not a.no_twin else 0  # 77: the twin's half was not run


if __name__ == "__main__":
    sys.exit(main())
