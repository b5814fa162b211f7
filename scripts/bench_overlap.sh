#!/usr/bin/env bash
# bench_overlap.sh: what the gradient all-reduce's overlap with the backward saves
# (docs/distributed.md "How much overlaps"): the same data-parallel bt-train job run with the
# default overlap and with dist.overlap=false (every bucket launched at the wait),
# alternating, and the medians over steps 3.. of the exposed communication time
# (metrics.jsonl phase_s.comm), the backward and the step. --zero adds a third job, the
# overlapped one with dist.zero_stage 1 (its all-gather of the weights after the optimizer
# counts in the exposed time; the optimizer runs on 1/N of the arena).
#
#   scripts/bench_overlap.sh [--build DIR] [--reps N] [--ranks N] [--steps N]
#                            [--bucket-mb M] [--width W] [--layers L] [--tcp] [--zero]
#
# The model is configs/synthetic-model widened to W (default 256; its 64 is too small for
# the communication to matter) with L text and L vision layers (default 4): 11.5 M
# parameters, a 44 MiB gradient arena, 44 buckets of 1 MiB (defaults). --tcp forces Open MPI's
# TCP path (--mca btl self,tcp, what ranks on different machines use) instead of shared
# memory. Data: data/synthetic (scripts/demo.sh), or a small set generated with bt-data synth
# into the work directory. Each rank gets one OpenMP thread. Deliberately not a test:
# timings depend on the machine (run it on a quiet one; on a loaded one the medians move by
# 2x between runs).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=build REPS=3 RANKS=2 STEPS=12 BUCKET=1 WIDTH=256 LAYERS=4 MCA=() MODES="none overlap"
while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --bucket-mb) BUCKET=$2; shift 2 ;;
    --width) WIDTH=$2; shift 2 ;;
    --layers) LAYERS=$2; shift 2 ;;
    --tcp) MCA=(--mca btl self,tcp); shift ;;
    --zero) MODES="none overlap zero"; shift ;;
    *) sed -n '2,21p' "$0"; exit 2 ;;
    esac
done
ninja -C "$BUILD" src/train/bt-train src/data/bt-data >/dev/null
WORK=$(mktemp -d /tmp/bench_overlap.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

DATA=data/synthetic
if [ ! -f "$DATA/train.jsonl" ]; then
    DATA=$WORK/data
    "$BUILD/src/data/bt-data" synth --out "$DATA" --train 512 --val 16 --test 16 --seed 0 \
        --size 64 >/dev/null
fi
mkdir -p "$WORK/model"
cp configs/synthetic-model/{merges.txt,preprocessor_config.json,tokenizer.json,vocab.json} \
    "$WORK/model/"
python3 - "$WORK" "$WIDTH" "$LAYERS" "$STEPS" "$BUCKET" "$(realpath "$DATA")" <<'PY'
import json, sys
work, w, layers, steps, bucket, data = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
c = json.load(open("configs/synthetic-model/config.json"))
heads = max(1, w // 64)
c.update(hidden_size=w, contrastive_hidden_size=w, num_attention_heads=heads)
c["text_config"].update(hidden_size=w, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * w)
c["vision_config"].update(hidden_size=w, num_hidden_layers=layers)
json.dump(c, open(f"{work}/model/config.json", "w"), indent=2)
run = {
    "model": {"config": f"{work}/model", "init_seed": 0, "heads": ["itc", "mlm"]},
    "data": {"train": f"{data}/train.jsonl", "max_length": 32, "seed": 1, "shuffle": True,
             "drop_last": True, "num_workers": 1},
    "train": {"batch_size": 4, "max_steps": steps, "lr": 1e-3, "warmup_steps": 1,
              "weight_decay": 0.01, "max_grad_norm": 1.0,
              "loss_weights": {"itc": 1, "itm": 0, "mlm": 1}, "seed": 5, "dropout": True,
              "threads": 1},
    "logging": {"steps": 1, "tensorboard": False, "report": False},
    "eval": {"strategy": "no", "at_end": False},
    "save": {"strategy": "no"},
    "dist": {"bucket_mb": bucket},
}
json.dump(run, open(f"{work}/run.json", "w"), indent=2)
PY

for i in $(seq "$REPS"); do
    for mode in $MODES; do
        extra=()
        [ $mode = none ] && extra=(--set dist.overlap=false)
        [ $mode = zero ] && extra=(--set dist.zero_stage=1)
        mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "${MCA[@]}" \
            -np "$RANKS" "$BUILD/src/train/bt-train" --quiet-config --config "$WORK/run.json" \
            --set "output.dir=$WORK/$mode$i" "${extra[@]}" >"$WORK/$mode$i.log" 2>&1 ||
            { cat "$WORK/$mode$i.log"; exit 1; }
    done
done
python3 - "$WORK" "$REPS" $MODES <<'PY'
import glob, json, statistics, sys
work, reps, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{reps} alternating repetitions; medians over the steps from 3 on")
for mode in modes:
    comm, bwd, step = [], [], []
    for f in sorted(glob.glob(f"{work}/{mode}[0-9]*/metrics.jsonl")):
        for line in open(f):
            r = json.loads(line)
            if r.get("type") != "train" or r["step"] < 3:
                continue
            comm.append(r["phase_s"]["comm"])
            bwd.append(r["phase_s"]["backward"])
            step.append(r["seconds"] / r["steps"])
    name = {"none": "dist.overlap=false", "overlap": "overlap (default)",
            "zero": "overlap + ZeRO-1"}[mode]
    print(f"{name:22s} exposed comm {statistics.median(comm) * 1e3:7.1f} ms  backward "
          f"{statistics.median(bwd) * 1e3:7.1f} ms  step {statistics.median(step) * 1e3:7.1f} ms"
          f"  ({len(comm)} steps)")
PY
