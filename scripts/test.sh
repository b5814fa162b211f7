#!/usr/bin/env bash
# test.sh: the test command of the README. On a fresh Debian 12 machine it installs the
# dependencies, builds bt (release and ASan/UBSan), runs the default test suite, runs the op,
# reference and determinism suites again at each lower CPU ISA level, runs the training-level
# tests again with another GEMM backend, thread count and ISA level (perturbation stage), builds
# bt with clang and runs the op, reference, determinism and unit suites there, runs the bad-input
# suite and the emulated AMX kernels again under the sanitizers (leaks included), runs each
# libFuzzer target for a bounded time, and ends with 'N passed, N failed, N skipped'. Exit status
# is non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh || { echo "0 passed, 1 failed"; exit 1; }

status=0
meson setup build --buildtype=release >/dev/null 2>&1 || meson setup --reconfigure build >/dev/null
ninja -C build >build-log.txt 2>&1 || { cat build-log.txt; echo "0 passed, 1 failed"; exit 1; }
meson test -C build --no-suite slow --print-errorlogs --num-processes 2 || status=1

logs=(build/meson-logs/testlog.json)
# The op, reference and determinism suites again at each ISA level below this CPU's best
# (bt's kernels, oneDNN and OpenBLAS capped together: tests/meson.build setups isa_*), so an
# AVX-512 machine also tests the AVX2 and scalar paths (docs/determinism.md).
levels=$(build/src/model/bt-forward --info | sed -n 's/^cpu isa levels supported: //p')
for lv in $levels; do
    [ "$lv" = "${levels##* }" ] && break # the best level: the default run above
    if ! BT_CPU_ISA=$lv build/src/model/bt-forward --info | grep -qx "bt kernels isa: $lv .*"; then
        echo "BT_CPU_ISA=$lv did not take effect"; status=1; continue
    fi
    meson test -C build --setup "isa_$lv" --suite op --suite reference --suite determinism \
        --print-errorlogs --num-processes 2 || status=1
    logs+=("build/meson-logs/testlog-isa_$lv.json")
done
# Perturbation stage (docs/determinism.md "Comparing two training runs"): the training-level
# tests again with another summation order (tests/meson.build setups gemm_openblas, threads_1,
# threads_3, isa_*), so that a bound tuned to one order fails here, not on a user's CPU. The op
# and reference suites (model_phases, model_memory, step_parity) already ran under the ISA caps
# above; test_dist (~75 s a run) runs with OpenBLAS and under the AVX2 cap (issue 21's CPU
# class), where a thread count or ISA changes its ranks' sums as well.
if [ "${BT_SKIP_PERTURB:-0}" != 1 ]; then
    perturb_train="bt_train step_parity model_phases model_memory eval_cli"
    perturb_runs=("threads_1 $perturb_train" "threads_3 $perturb_train")
    if BT_GEMM=openblas build/src/model/bt-forward --info | grep -q "^gemm backend: openblas"; then
        perturb_runs+=("gemm_openblas $perturb_train dist")
    else
        echo "perturbation stage: OpenBLAS not built (BT_GEMM=openblas), that setup not run"
    fi
    for lv in $levels; do
        [ "$lv" = "${levels##* }" ] && break
        perturb_runs+=("isa_$lv bt_train eval_cli$([ "$lv" = avx2 ] && echo " dist")")
    done
    for run in "${perturb_runs[@]}"; do
        read -r setup tests <<<"$run"
        # shellcheck disable=SC2086 # the test names are words
        meson test -C build --setup "$setup" --logbase perturb --print-errorlogs \
            --num-processes 2 $tests || status=1
        logs+=("build/meson-logs/perturb-$setup.json")
    done
fi
# The whole project built again by clang (Debian's clang, as the fuzz stage uses), with the op,
# reference, determinism and unit suites: a user's other compiler must build bt too, and give
# results as faithful (about a minute).
if [ "${BT_SKIP_CLANG:-0}" != 1 ]; then
    CC=clang meson setup build-clang --buildtype=release >/dev/null 2>&1 ||
        meson setup --reconfigure build-clang >/dev/null
    ninja -C build-clang >build-clang-log.txt 2>&1 || { cat build-clang-log.txt; status=1; }
    meson test -C build-clang --suite op --suite reference --suite determinism --suite unit \
        --print-errorlogs --num-processes 2 || status=1
    logs+=(build-clang/meson-logs/testlog.json)
fi
# The malformed-input tests again under AddressSanitizer + UBSan (docs/style.md 9).
if [ "${BT_SKIP_SANITIZE:-0}" != 1 ]; then
    meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false --buildtype=debug \
        >/dev/null 2>&1 || meson setup --reconfigure build-asan >/dev/null
    ninja -C build-asan >build-asan-log.txt 2>&1 || { cat build-asan-log.txt; status=1; }
    sanitizer_env=(ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1)
    env "${sanitizer_env[@]}" \
        meson test -C build-asan --suite badinput --print-errorlogs --num-processes 2 || status=1
    logs+=(build-asan/meson-logs/testlog.json)
    # the AMX attention kernels' tile loads and stores, which the sanitizers see only with the
    # tiles emulated (src/kernels/attention_amx_emulated.h); about 3 minutes in this build
    env "${sanitizer_env[@]}" \
        meson test -C build-asan --logbase asan-amx --timeout-multiplier 4 --print-errorlogs \
        attention_amx_emulated || status=1
    logs+=(build-asan/meson-logs/asan-amx.json)
fi
# libFuzzer targets of the input parsers (tests/fuzz), each for BT_FUZZ_SECONDS (default 30)
# under ASan + UBSan in a clang build of their sources; registered as meson tests of suite
# 'fuzz', so the summary below counts them. A libFuzzer run uses one core, so two run at once.
if [ "${BT_SKIP_FUZZ:-0}" != 1 ]; then
    fuzz_opts=(-Dfuzz=true -Dfuzz_seconds="${BT_FUZZ_SECONDS:-30}" -Db_lundef=false
               -Db_sanitize=address,undefined -Dc_args=-fsanitize=fuzzer-no-link
               -Dopenmp=disabled -Donednn=disabled -Dmpi=disabled --buildtype=debugoptimized)
    CC=clang meson setup build-fuzz "${fuzz_opts[@]}" >/dev/null 2>&1 ||
        meson setup --reconfigure build-fuzz "${fuzz_opts[@]}" >/dev/null
    ninja -C build-fuzz fuzz >build-fuzz-log.txt 2>&1 || { cat build-fuzz-log.txt; status=1; }
    meson test -C build-fuzz --no-rebuild --suite fuzz --print-errorlogs --num-processes 2 ||
        status=1
    logs+=(build-fuzz/meson-logs/testlog.json)
fi
rm -f build-log.txt build-clang-log.txt build-asan-log.txt build-fuzz-log.txt

python3 scripts/test_summary.py "${logs[@]}" || status=1
exit $status
