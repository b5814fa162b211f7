#!/usr/bin/env bash
# demo.sh: the README's first command. On a fresh Debian 12 machine it installs the
# dependencies, builds bt, generates the synthetic captioned-shapes dataset, measures an
# untrained BridgeTower on its validation split (chance level), fine-tunes it with
# `bt-train --config configs/train/demo.json` (the small model, ITC, minutes on 2 cores),
# and shows that it learned: validation recall@1 and 5-way caption-choice accuracy per epoch,
# from chance to far above it, plus the report (out/demo-train/report.html).
#
#   bash scripts/demo.sh        (root or sudo for the packages)
#
# Idempotent: data/synthetic/ and out/ are rewritten (fixed seeds; same threads, same bytes).
# BT_BUILD_DIR (default build) picks the meson build directory. Exit status non-zero on any
# failure, and when the trained model's 5-way accuracy is not clearly above chance (> 60%).
#
# Deliberately not here: the New Yorker run (docs/newyorker.md), MPI (docs/distributed.md).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BT_BUILD_DIR:-build}
DATA=data/synthetic
OUT=out
RUN=$OUT/demo-train

section() { printf '\n== %s ==\n' "$1"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

section "0. install dependencies and build ($BUILD/)"
bash scripts/install_deps.sh
[ -d "$BUILD" ] || meson setup "$BUILD" --buildtype=release >/dev/null
t0=$(now)
if ! ninja -C "$BUILD" src/data/bt-data src/model/bt-checkpoint src/train/bt-eval \
    src/train/bt-train >"$BUILD/demo-build.log" 2>&1; then
    tail -n 40 "$BUILD/demo-build.log"
    exit 1
fi
echo "built bt-data, bt-checkpoint, bt-eval, bt-train in $(since "$t0") s" \
    "(log: $BUILD/demo-build.log)"
BT_DATA=$BUILD/src/data/bt-data
BT_CHECKPOINT=$BUILD/src/model/bt-checkpoint
BT_EVAL=$BUILD/src/train/bt-eval
BT_TRAIN=$BUILD/src/train/bt-train
mkdir -p "$OUT" "$(dirname "$DATA")"
start=$(now)

section "1. generate the synthetic dataset ($DATA/): 512 train, 128 validation records"
"$BT_DATA" synth --out "$DATA" --train 512 --val 128 --test 128 --seed 0 --size 64
head -n 1 "$DATA/val.jsonl"
"$BT_DATA" check --data "$DATA/train.jsonl" --model configs/synthetic-model --max-length 32 |
    tail -n 1

section "2. before training: the model bt-train starts from (HF init rules, seed 0)"
"$BT_CHECKPOINT" --model configs/synthetic-model --init --heads itc --seed 0 \
    --save "$OUT/demo-init" >/dev/null
"$BT_EVAL" --model "$OUT/demo-init" --data "$DATA/val.jsonl" --json "$OUT/demo-init-eval.json" \
    2>/dev/null | grep -v '^bt-eval: wrote'
echo "(chance: recall@1 1/128 = 0.8%, 5-way accuracy 20%)"

section "3. train: bt-train --config configs/train/demo.json (output in $RUN/)"
rm -rf "$RUN"
t1=$(now)
"$BT_TRAIN" --config configs/train/demo.json --quiet-config
train_s=$(since "$t1")

section "4. what it learned (validation split, from $RUN/metrics.jsonl)"
python3 - "$RUN/metrics.jsonl" "$OUT/demo-init-eval.json" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
evals = [r for r in rows if r.get("type") == "eval"]
init = json.load(open(sys.argv[2]))
print("%-8s %-7s %-10s %-10s %-10s" % ("epoch", "step", "t2i R@1", "i2t R@1", "5-way acc"))
print("%-8s %-7s %-10.1f %-10.1f %-10.1f" % ("start", 0, 100 * init["text_to_image"]["r1"],
      100 * init["image_to_text"]["r1"], 100 * init["choice"]["accuracy"]))
for e in evals:
    print("%-8.0f %-7d %-10.1f %-10.1f %-10.1f" % (e["epoch"], e["step"], 100 * e["t2i_r1"],
          100 * e["i2t_r1"], 100 * e["accuracy_5way"]))
last = evals[-1]
ok = last["accuracy_5way"] > 0.60
print("5-way caption choice: %.1f%% -> %.1f%% (chance 20%%): %s" % (
    100 * init["choice"]["accuracy"], 100 * last["accuracy_5way"],
    "learned" if ok else "DID NOT LEARN"))
sys.exit(0 if ok else 1)
EOF

section "done"
echo "Trained in $train_s s (total $(since "$start") s). Outputs in $RUN/: the fine-tuned model" \
    "(an HF BridgeTower directory), checkpoints, metrics.jsonl, TensorBoard events" \
    "(tensorboard --logdir $RUN, TensorBoard in a venv: docs/outputs.md), summary.json and report.html (open it in a browser)."
