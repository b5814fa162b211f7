#!/usr/bin/env bash
# demo.sh: the README's first command. The most complete real path bt has until the trainer
# (bt-train) lands: it generates the synthetic captioned-shapes dataset, checks it, builds a
# fresh small BridgeTower from configs/synthetic-model by Hugging Face's init rules and saves
# it as an HF model directory, assembles a real batch exactly as the data loader will feed the
# trainer, and runs forward + backward (ITC and ITM losses, gradient norm) on it; then it runs
# the shipped tiny checkpoint on its fixture batch and compares the ITC loss with the PyTorch
# reference value stored beside it.
#
#   bash scripts/demo.sh        (on a fresh Debian 12 machine; root or sudo for the packages)
#
# Idempotent: every run rewrites data/synthetic/ and out/ with the same bytes (fixed seeds).
# BT_BUILD_DIR (default build) picks the meson build directory. Exit status non-zero on any
# failure, including an ITC loss that disagrees with the reference.
#
# Deliberately not here: training (optimizer steps, evaluation, checkpoints) - that is
# bt-train's job; thread or backend tuning (OMP_NUM_THREADS and BT_* variables pass through).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BT_BUILD_DIR:-build}
DATA=data/synthetic
OUT=out

section() { printf '\n== %s ==\n' "$1"; }
now() { date +%s.%N; }

# The value of a 0-d F32 tensor of a safetensors file (8-byte little-endian header length,
# JSON header, data), read with od: no Python needed.
scalar_f32() {
    local file=$1 name=$2 n hdr ent off
    n=$(od -A n -t u8 -N 8 "$file" | tr -d ' ')
    hdr=$(head -c $((8 + n)) "$file" | tail -c "$n")
    ent=$(printf '%s' "$hdr" | grep -o "\"$name\" *: *{[^}]*}") || {
        echo "demo: $file has no tensor '$name'" >&2
        return 1
    }
    off=$(printf '%s' "$ent" | sed -E 's/.*"data_offsets" *: *\[ *([0-9]+).*/\1/')
    od -A n -t f4 -j $((8 + n + off)) -N 4 "$file" | tr -d ' '
}

section "0. install dependencies and build ($BUILD/)"
bash scripts/install_deps.sh
[ -d "$BUILD" ] || meson setup "$BUILD" --buildtype=release >/dev/null
t0=$(now)
if ! ninja -C "$BUILD" src/data/bt-data src/model/bt-checkpoint src/model/bt-forward \
    >"$BUILD/demo-build.log" 2>&1; then
    tail -n 40 "$BUILD/demo-build.log"
    exit 1
fi
echo "built bt-data, bt-checkpoint, bt-forward in $(awk -v a="$t0" -v b="$(now)" \
    'BEGIN { printf "%.1f", b - a }') s (log: $BUILD/demo-build.log)"
BT_DATA=$BUILD/src/data/bt-data
BT_CHECKPOINT=$BUILD/src/model/bt-checkpoint
BT_FORWARD=$BUILD/src/model/bt-forward
mkdir -p "$OUT" "$(dirname "$DATA")"
start=$(now)

section "1. generate the synthetic dataset ($DATA/)"
"$BT_DATA" synth --out "$DATA" --train 512 --val 64 --test 64 --seed 0 --size 64
head -n 2 "$DATA/train.jsonl"

section "2. check it (every image decoded, every caption tokenized)"
"$BT_DATA" check --data "$DATA/train.jsonl" --model configs/synthetic-model --max-length 32

section "3. a fresh model: configs/synthetic-model, HF init rules, seed 0 -> $OUT/demo-model/"
"$BT_CHECKPOINT" --model configs/synthetic-model --init --heads itc,itm,mlm --seed 0 \
    --save "$OUT/demo-model"
ls "$OUT/demo-model"

section "4. batch 0 exactly as the loader feeds the trainer (shuffle seed 0, batch 16)"
"$BT_DATA" batch --data "$DATA/train.jsonl" --model "$OUT/demo-model" --batch-size 16 \
    --index 0 --seed 0 --output "$OUT/batch0.safetensors"

section "5. forward + backward on that batch: ITC and ITM losses, gradient norm"
for head in itc itm; do
    "$BT_FORWARD" --model "$OUT/demo-model" --inputs "$OUT/batch0.safetensors" --head "$head" \
        --backward --output "$OUT/$head.safetensors"
done
echo "(untrained: ITC starts near ln(16) = 2.77 for 16 pairs, ITM near ln(2) = 0.69)"

section "6. the shipped tiny checkpoint vs the PyTorch reference (tests/fixtures/tiny)"
"$BT_FORWARD" --model tests/fixtures/tiny --inputs tests/fixtures/tiny_io.safetensors \
    --head itc --backward --output "$OUT/tiny-itc.safetensors"
ours=$(scalar_f32 "$OUT/tiny-itc.safetensors" loss)
ref=$(scalar_f32 tests/fixtures/tiny_io.safetensors loss_itc)
# Tolerance of tests/test_bt_forward.c for a scalar: |a-b| <= 1e-5*|b| + 1e-5*|b| (fp32 on
# both sides, different summation order and libm).
awk -v a="$ours" -v b="$ref" 'BEGIN {
    d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b
    printf "ITC loss: bt %s, PyTorch reference %s, |difference| %.2g (allowed %.2g): %s\n",
           a, b, d, 2e-5 * m, d <= 2e-5 * m ? "agree" : "DISAGREE"
    exit !(d <= 2e-5 * m) }'

section "done"
echo "Shown in $(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s: a" \
    "synthetic dataset generated and checked, a BridgeTower initialized by HF's rules and" \
    "saved as an HF model directory, a real loader batch, forward + backward with ITC/ITM" \
    "losses and gradients, and PyTorch parity of the tiny checkpoint. Training (optimizer" \
    "steps on these batches) arrives with bt-train."
