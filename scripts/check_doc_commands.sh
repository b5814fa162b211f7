#!/usr/bin/env bash
# check_doc_commands.sh: runs, as written, every command of the ```sh blocks of README.md and
# of the guides in docs/ (DOCS below) that can run offline, so that a doc command that breaks
# fails CI (issue 23). The blocks are read by scripts/lint_doc_commands.py --list; that script
# also checks the commands of every doc without running them (meson test doc_lint), which is
# all that docs/benchmarks.md gets in CI: its commands are benchmarks of minutes to hours
# (--benchmarks, below, runs them under a time limit).
# Commands are run in order, file after file, each with bash -e from one scratch directory
# laid out like the repository root (build/, configs/, scripts/ linked in; HOME there too, so
# ~/.venvs is scratch), so a guide may use what the README's commands made (out/demo-train).
# Blocks of output or JSON are fenced without "sh" and not run.
#
# What stands in for the network (nothing else is changed):
#   huggingface-cli download REPO --local-dir DIR
#         DIR becomes an emulated model directory: configs/synthetic-model with a 130-token
#         position table (doc_standins.py model-config), initialized by `bt-checkpoint --init`
#         (heads itc, itm, mlm; bridgetower-base: itm, mlm, as the real one lacks ITC);
#   export_newyorker.py (through the venv's python) gets a `datasets` module on PYTHONPATH
#         that serves rows shaped like the real `matching` config, built from `bt-data synth`
#         JPEGs (doc_standins.py datasets); the script itself runs unchanged;
#   pip install ...        not run (network); the venv it installs into is created as written;
#   apt-get install PKGS   not run (CI installs with scripts/install_deps.sh); each PKG must
#         have an install candidate in apt's lists (a misspelt package fails the check);
#   git clone URL, and the two commands that use that clone (make_hf_shim.py, and
#         verify_hf_checkpoint.py on its shim): not run (network);
#   meson install          run with DESTDIR set to a scratch directory;
#   mpirun ...             run with OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1,
#         which the README says Open MPI wants as root (CI runs as root).
# Not run, with the reason printed: scripts/test.sh (CI itself), this script, `meson test`
# lines (CI runs every suite and setup itself), scripts/check_synthetic_learnable.py (the
# PyTorch twin's 16 epochs, minutes), bench_dist (a benchmark of minutes), /usr/bin/python3
# scripts/convert_checkpoint.py without python3-torch (run when torch imports), mpirun in a
# build without MPI, tensorboard (not a CI dependency), and a command the same as one already
# run.
#
#   bash scripts/check_doc_commands.sh [BUILD_DIR]     (default: build; ~2.5 min on 2 cores)
# Exit status: 0 when every command that runs exits 0; 1 otherwise (the failing file:line,
# the command and its output are printed).
#
#   bash scripts/check_doc_commands.sh [BUILD_DIR] --benchmarks SECONDS
# runs the commands of docs/benchmarks.md instead (not in CI: hours as written), each one
# stopped after SECONDS except `meson setup` and `ninja` lines, in a scratch directory with
# the whole source tree linked in (its `meson setup build-NAME` lines build there). A command
# still running at the limit is counted as stopped, not as run: it started and had not
# failed by then, which is all this shows of it. An exit of 77 is a skip (bench_side_by_side's
# twin without a Python that has torch). `meson test` lines run here. Every command is tried;
# the failures are listed at the end (exit 1).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
usage() {
    echo "usage: bash scripts/check_doc_commands.sh [BUILD_DIR] [--benchmarks SECONDS]" >&2
    exit 2
}
BUILD_ARG=$ROOT/build LIMIT=
while [ $# -gt 0 ]; do
    case "$1" in
    --benchmarks)
        [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || usage
        LIMIT=$2
        shift 2 ;;
    -*) usage ;;
    *) BUILD_ARG=$1; shift ;;
    esac
done
BUILD=$(cd "$BUILD_ARG" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/home" "$WORK/standins"
ln -s "$BUILD" "$WORK/build"
if [ -n "$LIMIT" ]; then # the source tree, for `meson setup build-NAME`
    for f in $(git -C "$ROOT" ls-files | cut -d/ -f1 | sort -u); do
        ln -s "$ROOT/$f" "$WORK/$f"
    done
else
    ln -s "$ROOT/configs" "$WORK/configs"
    ln -s "$ROOT/scripts" "$WORK/scripts"
fi
export HOME=$WORK/home OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

# The stand-ins: a synthetic set for the dataset rows, an emulated model config.
"$BUILD/src/data/bt-data" synth --out "$WORK/standins/synth" --train 12 --val 6 --test 6 \
    --seed 0 >/dev/null
python3 "$ROOT/scripts/doc_standins.py" datasets "$WORK/standins/synth" "$WORK/standins/py"
mkdir -p "$WORK/standins/model"
cp "$ROOT"/configs/synthetic-model/{vocab.json,merges.txt,tokenizer.json,preprocessor_config.json} \
    "$WORK/standins/model/"
python3 "$ROOT/scripts/doc_standins.py" model-config "$ROOT/configs/synthetic-model/config.json" \
    "$WORK/standins/model/config.json"

ran=0 skipped=0 stopped=0 failed=()
skip() { echo "skip  $1: $2"; skipped=$((skipped + 1)); }
run() { # run LOC CMD [ENV...]: the command as written, in $WORK
    local loc=$1 cmd=$2 rc=0
    shift 2
    local limit=()
    case "$cmd" in
    "meson setup"* | *"ninja -C"*) ;;
    *) [ -z "$LIMIT" ] || limit=(timeout -k 10 "$LIMIT") ;;
    esac
    echo "run   $loc: $cmd"
    # stdin from /dev/null: mpirun (and any command) would read the list of commands below
    (cd "$WORK" && env "$@" "${limit[@]}" bash -eo pipefail -c "$cmd") </dev/null \
        >"$WORK/out.log" 2>&1 || rc=$?
    if [[ -n "$LIMIT" && $rc == 124 && ${#limit[@]} -gt 0 ]]; then
        echo "stop  $loc: still running after $LIMIT s, no error by then"
        stopped=$((stopped + 1))
        return
    fi
    if [[ -n "$LIMIT" && $rc == 77 ]]; then
        skip "$loc" "exit 77: $(tail -n 1 "$WORK/out.log")"
        return
    fi
    if [ $rc != 0 ]; then
        echo "check_doc_commands: FAIL at $loc (exit $rc): $cmd" >&2
        tail -n 40 "$WORK/out.log" >&2
        [ -n "$LIMIT" ] || exit 1
        failed+=("$loc")
        return
    fi
    ran=$((ran + 1))
}
standin_model() { # DIR named by --local-dir
    local dir=$1 heads=itc,itm,mlm
    case "$dir" in *bridgetower-base*) heads=itm,mlm ;; esac
    (cd "$WORK" && build/src/model/bt-checkpoint --model "$WORK/standins/model" --init \
        --heads "$heads" --save "$dir" >/dev/null)
}
has_torch=0
/usr/bin/python3 -c "import torch" 2>/dev/null && has_torch=1
has_mpi=0
"$BUILD/src/train/bt-train" --version | grep -q '^mpi: yes' && has_mpi=1

# file:line<TAB>command, continuation lines joined, for every line of every ```sh block
DOCS="README.md docs/newyorker.md docs/data.md docs/checkpoints.md docs/outputs.md docs/model.md
      docs/determinism.md docs/distributed.md"
[ -z "$LIMIT" ] || DOCS=docs/benchmarks.md
# shellcheck disable=SC2086 # the file names are words
commands=$(cd "$ROOT" && python3 scripts/lint_doc_commands.py --list $DOCS)
declare -A done_cmds=()

while IFS=$'\t' read -r loc cmd; do
    [[ -n "$cmd" && "$cmd" != "#"* ]] || continue # a comment line of a block
    if [ -n "${done_cmds[$cmd]:-}" ]; then
        skip "$loc" "the same command ran at ${done_cmds[$cmd]}"
        continue
    fi
    done_cmds[$cmd]=$loc
    case "$cmd" in
    "bash scripts/test.sh"*) skip "$loc" "CI runs it: this check is one of its steps" ;;
    *scripts/check_doc_commands.sh*) skip "$loc" "this check itself" ;;
    "meson test"*)
        if [ -n "$LIMIT" ]; then run "$loc" "$cmd"
        else skip "$loc" "CI runs every suite and setup itself (scripts/test.sh)"; fi ;;
    *scripts/check_synthetic_learnable.py*) skip "$loc" "the PyTorch twin's 16 epochs (minutes)" ;;
    *tests/bench_dist*) skip "$loc" "a benchmark of minutes (doc_lint checks its options)" ;;
    mpirun*)
        if [ $has_mpi = 1 ]; then
            run "$loc" "$cmd" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        else
            skip "$loc" "this build has no MPI (meson setup -Dmpi=disabled)"
        fi ;;
    tensorboard* | */bin/tensorboard\ *) skip "$loc" "tensorboard is not a CI dependency" ;;
    "meson install"*) run "$loc" "$cmd" DESTDIR="$WORK/destdir" ;;
    *"apt-get install"*)
        for p in $(sed 's/#.*//; s/.*apt-get install//' <<<"$cmd" | tr ' ' '\n' | grep -v '^-'); do
            policy=$(apt-cache policy "$p" 2>/dev/null || true)
            grep -q 'Candidate: [0-9]' <<<"$policy" ||
                { echo "check_doc_commands: FAIL at $loc: Debian has no package '$p'" >&2; exit 1; }
        done
        skip "$loc" "packages exist in apt's lists (installed by scripts/install_deps.sh in CI)" ;;
    *"pip install"*) skip "$loc" "needs the network (the venv it uses is created above)" ;;
    "git clone"*) skip "$loc" "needs the network" ;;
    *scripts/make_hf_shim.py* | *scripts/verify_hf_checkpoint.py*)
        skip "$loc" "needs the clone of transformers above (the network)" ;;
    *"huggingface-cli download"*)
        dir=$(sed -n 's/.*--local-dir \([^ ]*\).*/\1/p' <<<"$cmd")
        [ -n "$dir" ] || { echo "check_doc_commands: FAIL at $loc: no --local-dir" >&2; exit 1; }
        standin_model "$dir"
        echo "stand $loc: $dir = an emulated model (bt-checkpoint --init), for the download"
        ;;
    *scripts/convert_checkpoint.py*)
        if [ $has_torch = 1 ]; then
            skip "$loc" "the stand-in is safetensors already (convert has its own fixtures)"
        else
            skip "$loc" "needs python3-torch (scripts/install_deps.sh --python)"
        fi ;;
    *scripts/export_newyorker.py*) run "$loc" "$cmd" PYTHONPATH="$WORK/standins/py" ;;
    *) run "$loc" "$cmd" ;;
    esac
done <<<"$commands"
if [ -n "$LIMIT" ]; then
    where=${failed[*]:+: ${failed[*]}}
    echo "check_doc_commands: $ran command(s) ran to the end, $stopped stopped at $LIMIT s with" \
        "no error by then, $skipped not run (reasons above), ${#failed[@]} failed$where"
    [ ${#failed[@]} = 0 ] || exit 1
    exit 0
fi
echo "check_doc_commands: ok: $ran command(s) ran, $skipped not run (reasons above)"
