#!/bin/sh
# run_fuzz.sh TARGET WORK_CORPUS SEED_CORPUS SECONDS ARTIFACT_DIR
# One bounded libFuzzer run of TARGET (tests/fuzz/meson.build registers one per target, suite
# 'fuzz'): new inputs go to WORK_CORPUS (in the build dir), the committed seeds are read from
# SEED_CORPUS, a crash is written under ARTIFACT_DIR and fails the test (libFuzzer exits
# non-zero). A crash found this way becomes a regression input under tests/fixtures/fuzz/.
set -eu
mkdir -p "$2" "$5"
# libFuzzer exits 77 on a crash by default, and 77 is meson's "skipped": a finding would be
# counted as a skip (it was, once: fuzz_config's crash of session 25). Crashes and timeouts
# exit 1 here; out of memory exits 71. Each fails the test.
exec "$1" -max_total_time="$4" -timeout=20 -rss_limit_mb=2048 -max_len=65536 \
    -error_exitcode=1 -timeout_exitcode=1 \
    -print_final_stats=1 -artifact_prefix="$5/" "$2" "$3"
