#!/usr/bin/env bash
# check_install.sh: `meson install` into a DESTDIR gives a usable installed program, as a
# Debian user gets it (issue 23). Checks, each failing the script with a message:
#   - bin/: the 7 binaries; each answers --version (first line "<name> (bt) <version>", the git
#     revision, build type, GEMM backends, kernel ISA levels) and --help on stdout, exit 0;
#   - share/man/man1/<binary>.1 for each (help2man at build time; skipped with a notice when
#     the build has no help2man: `meson configure -Dman=enabled` makes it required);
#   - share/bt/: the configs (configs/train/demo.json, configs/synthetic-model/) and the user
#     scripts (scripts/convert_checkpoint.py with its safetensors_io.py, export_newyorker.py),
#     executable; share/doc/bt/LICENSE;
#   - the installed bt-data and bt-train, run from an empty directory with the installed
#     files only, generate the synthetic set and train the demo config for 3 steps (with its
#     final evaluation and report), and bt-eval evaluates the result.
#   bash scripts/check_install.sh [BUILD_DIR]      (default: build; run after ninja)
# Runs in ~20 s on 2 cores. Leaves nothing behind (the DESTDIR is a temp directory).
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
DEST=$(mktemp -d)
trap 'rm -rf "$DEST"' EXIT
fail() { echo "check_install: FAIL: $*" >&2; exit 1; }

meson install -C "$BUILD" --destdir "$DEST" --no-rebuild --quiet >"$DEST/install.log" 2>&1 ||
    { cat "$DEST/install.log" >&2; fail "meson install --destdir"; }
opt() {
    meson introspect "$BUILD" --buildoptions |
        python3 -c "import json, sys; print(next(o['value'] for o in json.load(sys.stdin) if o['name'] == '$1'))"
}
PREFIX=$(opt prefix)
ROOT=$DEST$PREFIX
BIN=$ROOT/$(opt bindir)
SHARE=$ROOT/$(opt datadir)
MAN=$ROOT/$(opt mandir)/man1
VERSION=$(meson introspect "$BUILD" --projectinfo | python3 -c "import json, sys; print(json.load(sys.stdin)['version'])")

has_man=$(meson introspect "$BUILD" --targets | python3 -c \
    "import json, sys; print(int(any(t['name'] == 'bt-train.1' for t in json.load(sys.stdin))))")
for b in bt-train bt-eval bt-embed bt-report bt-data bt-forward bt-checkpoint; do
    [ -x "$BIN/$b" ] || fail "$BIN/$b is not installed"
    v=$("$BIN/$b" --version) || fail "$b --version exits non-zero"
    [ "$(head -n 1 <<<"$v")" = "$b (bt) $VERSION" ] || fail "$b --version first line: $(head -n 1 <<<"$v")"
    for k in "git revision:" "build type:" "gemm backends:" "kernel isa levels:"; do
        grep -q "^$k" <<<"$v" || fail "$b --version lacks '$k'"
    done
    h=$("$BIN/$b" --help 2>/dev/null) || fail "$b --help exits non-zero"
    grep -q "usage" <<<"$h" || fail "$b --help prints no usage on stdout"
    if [ "$has_man" = 1 ]; then
        [ -s "$MAN/$b.1" ] || fail "$MAN/$b.1 is not installed"
        grep -q "^\.TH \"\?$(tr a-z A-Z <<<"$b")" "$MAN/$b.1" || fail "$b.1 is not a man page"
    fi
done
[ "$has_man" = 1 ] || echo "check_install: notice: no man pages (help2man not found at setup)"
for f in configs/train/demo.json configs/synthetic-model/config.json \
         configs/synthetic-model/vocab.json configs/bridgetower-base/config.json; do
    [ -s "$SHARE/bt/$f" ] || fail "$SHARE/bt/$f is not installed"
done
for f in convert_checkpoint.py safetensors_io.py export_newyorker.py; do
    [ -x "$SHARE/bt/scripts/$f" ] || fail "$SHARE/bt/scripts/$f is not installed executable"
done
[ -s "$SHARE/doc/bt/LICENSE" ] || fail "$SHARE/doc/bt/LICENSE is not installed"

# The demo, from an empty directory, with the installed binaries and configs only.
WORK=$DEST/work
mkdir -p "$WORK"
cd "$WORK"
export OMP_NUM_THREADS=1
"$BIN/bt-data" synth --out data/synthetic --train 64 --val 16 --test 8 --seed 0 >synth.log 2>&1 ||
    { cat synth.log >&2; fail "installed bt-data synth"; }
"$BIN/bt-train" --config "$SHARE/bt/configs/train/demo.json" --quiet-config \
    --set model.config="$SHARE/bt/configs/synthetic-model" --set train.max_steps=3 \
    --set train.threads=1 --set output.dir=out/demo-installed >train.log 2>&1 ||
    { tail -n 30 train.log >&2; fail "installed bt-train on the demo config"; }
for f in model.safetensors config.json eval_results.json report.html; do
    [ -s "out/demo-installed/$f" ] || fail "the installed bt-train wrote no $f"
done
"$BIN/bt-eval" --model out/demo-installed --data data/synthetic/val.jsonl >eval.log 2>&1 ||
    { cat eval.log >&2; fail "installed bt-eval on the trained model"; }
echo "check_install: ok ($BIN: 7 binaries with --version/--help$([ "$has_man" = 1 ] && echo ", man pages"); share/bt; LICENSE; demo trained 3 steps)"
