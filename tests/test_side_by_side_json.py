#!/usr/bin/env python3
"""test_side_by_side_json.py: scripts/bench_side_by_side.py --json-out keeps what a stopped run
had measured (a machine lent for minutes ends the run wherever it is).

Usage (meson passes the paths): test_side_by_side_json.py SCRIPT BUILD_DIR

Runs `--quick --no-twin --json-out F` (bt's half, tiny config) with and without --scaling,
each twice:
  - stopped (SIGTERM to its process group) as soon as F holds one finished run: F must then
    be whole JSON with "complete": false and that run's result (a step time), with runs left;
    --scaling --resume on that F: refused (exit 2, F unchanged) with another --steps; with
    the same grid, F ends complete, with the finished point as it was and the rest run;
  - to the end: F must hold "complete": true and every run (each point of the scaling grid;
    the side by side's four), each with the machine probe's readings around it ("machine":
    GFLOP/s before and after, steal seconds during), and no temporary file may be left beside
    it.
And --scaling --jobs 2 (two points at a time, each on its own core) to the end: every point in
F, which records "jobs": 2, with the note that compares the base point run alone and among the
others; --jobs without --scaling is refused.
Exit 0 pass, 1 fail (every failed check printed); 77 (skip) when the build has no bench_step.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def read(path):
    """F's record, or None while it is not there yet."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


# The two uses: (name, the options beside --quick --no-twin, the finished runs of a record
# (each with bt's median step), the runs the whole grid or table has).
def scaling_runs(rec):
    return [p["bt"] for p in (rec or {}).get("points", []) if "bt" in p]


def scaling_all(rec):
    """The grid's distinct points (a point shared by two tables runs once)."""
    return len({tuple(r[k] for k in ("batch", "image", "text", "threads", "ranks"))
                for rows in (rec or {}).get("tables", {}).values() for r in rows})


USES = (("--scaling", ["--scaling"], scaling_runs, scaling_all),
        # bt's four runs of the tiny config: train and infer, fp32 and bf16
        ("the side by side", [], lambda rec: (rec or {}).get("results", []), lambda rec: 4))


def start(script, build, out, opts, stderr=subprocess.DEVNULL):
    cmd = [sys.executable, script] + opts + ["--quick", "--no-twin", "--threads", "1",
                                             "--build", build, "--json-out", out]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, text=True,
                            start_new_session=True)


def check_resume(script, build, out, stopped):
    """--scaling --resume on the stopped run's record: a record of another step count is
    refused and left as it is; the same grid keeps the finished points and runs the rest."""
    with open(out, "rb") as f:
        before = f.read()
    p = start(script, build, out, ["--scaling", "--resume", "--steps", "2"], subprocess.PIPE)
    err = p.communicate(timeout=600)[1]
    with open(out, "rb") as f:
        after = f.read()
    check(p.returncode == 2 and "steps is 3, this run's 2" in err and after == before,
          "--resume refuses a record of another step count and leaves it (exit %s: %s)"
          % (p.returncode, err.strip().splitlines()[-1:] if err else ""))
    p = start(script, build, out, ["--scaling", "--resume"])
    rc = p.wait(timeout=600)
    rec = read(out)
    check(rc == 0 and rec is not None and rec.get("complete") is True,
          "--resume ends with a complete record (exit %s)" % rc)
    kept = [c for c in stopped["points"] if "bt" in c]
    check(rec is not None and all(c in rec["points"] for c in kept),
          "--resume kept the %d finished point(s) as they were (not run again)" % len(kept))
    check(rec is not None and len(scaling_runs(rec)) == scaling_all(rec),
          "--resume ran the rest (%d of %d points)" % (len(scaling_runs(rec)), scaling_all(rec)))


def check_use(script, build, out, name, opts, runs, all_runs):
    # 1. stopped after its first run
    p = start(script, build, out, opts)
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None and not runs(read(out)):
        time.sleep(0.05)
    ran_out = p.poll() is not None
    if not ran_out:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:  # it ended between the poll and the kill
            ran_out = True
    p.wait()
    check(not ran_out, "%s: the run was stopped while runs were left (it had not ended)" % name)
    rec = read(out)
    check(rec is not None, "%s: the JSON is there after the stop and parses" % name)
    check(rec is not None and rec.get("complete") is False,
          "%s: the stopped run's record says \"complete\": false" % name)
    done = runs(rec)
    check(len(done) >= 1 and all(d.get("median_step_s", 0) > 0 for d in done),
          "%s: the finished run is in it with bt's step time (%d run(s))" % (name, len(done)))
    check(len(done) < all_runs(rec), "%s: fewer runs than the whole %d (the stop came before "
          "the end)" % (name, all_runs(rec)))
    if rec is not None and "--scaling" in opts:
        check_resume(script, build, out, rec)
    # 2. to the end
    if os.path.exists(out):
        os.remove(out)
    p = start(script, build, out, opts)
    rc = p.wait(timeout=600)
    rec = read(out)
    check(rc == 0, "%s: the whole run exits 0 (got %s)" % (name, rc))
    check(rec is not None and rec.get("complete") is True,
          "%s: the whole run's record says \"complete\": true" % name)
    check(rec is not None and len(runs(rec)) == all_runs(rec) > 1,
          "%s: every run is in it (%d of %d)" % (name, len(runs(rec)), all_runs(rec)))
    check(not os.path.exists(out + ".part"), "%s: no temporary file is left" % name)
    probes = [r.get("machine", {}) for r in runs(rec)]
    check(probes and all(m.get("probe_gflops_before", 0) > 0 and m.get("probe_gflops_after", 0) > 0
                         and isinstance(m.get("steal_s"), float) and m["steal_s"] >= 0
                         for m in probes),
          "%s: every run has the machine probe's GFLOP/s before and after it and the steal "
          "seconds during it (%s)" % (name, probes[:1]))


def check_jobs(script, build, out):
    """--scaling --jobs 2: the grid's points two at a time, each on its own core."""
    if os.path.exists(out):
        os.remove(out)
    p = start(script, build, out, ["--scaling", "--jobs", "2"], subprocess.PIPE)
    err = p.communicate(timeout=600)[1]
    rec = read(out)
    check(p.returncode == 0 and rec is not None and rec.get("complete") is True,
          "--jobs 2: the whole run exits 0 with a complete record (exit %s: %s)"
          % (p.returncode, err.strip().splitlines()[-1:] if err else ""))
    check(rec is not None and len(scaling_runs(rec)) == scaling_all(rec) > 1,
          "--jobs 2: every point is in it (%d of %d)" % (len(scaling_runs(rec)), scaling_all(rec)))
    check(rec is not None and rec.get("jobs") == 2, "--jobs 2: the record says \"jobs\": 2")
    probe = [n for n in (rec or {}).get("notes", []) if n.startswith("contention (--jobs 2): the "
                                                                    "base point's bt took")]
    check(len(probe) == 1, "--jobs 2: one note compares the base point alone and among the "
          "others (%s)" % (probe or "none"))
    check(not os.path.exists(out + ".part"), "--jobs 2: no temporary file is left")
    p = subprocess.run([sys.executable, script, "--jobs", "2", "--quick", "--no-twin",
                        "--build", build], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    check(p.returncode == 2 and "--jobs goes with --scaling" in p.stderr,
          "--jobs without --scaling is refused (exit %s)" % p.returncode)


def main():
    script, build = sys.argv[1], sys.argv[2]
    if not os.path.exists(os.path.join(build, "tests", "bench_step")):
        print("skip: no bench_step in", build)
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        for name, opts, runs, all_runs in USES:
            check_use(script, build, os.path.join(tmp, "out.json"), name, opts, runs, all_runs)
        check_jobs(script, build, os.path.join(tmp, "out.json"))
    print("%d check(s) failed" % len(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
