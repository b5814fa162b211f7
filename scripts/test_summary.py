#!/usr/bin/env python3
"""test_summary.py: prints the closing 'N passed, N failed, N skipped' line of a meson test
run from one or more meson-logs/testlog.json files (preceded by the number of fuzz runs of
suite 'fuzz' and their total time, when there are any), and exits 1 when any test failed (or
no test ran). Usage: test_summary.py build/meson-logs/testlog.json [more.json ...]"""
import json
import sys

passed = failed = skipped = 0
fuzz_runs, fuzz_seconds = 0, 0.0
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            result = rec.get("result", "")
            # meson names a test "project:suite+suite / name"; fuzz runs are suite 'fuzz'.
            suites = rec.get("name", "").split(" / ")[0].split(":")[-1].split("+")
            if "fuzz" in suites:
                fuzz_runs += 1
                fuzz_seconds += float(rec.get("duration") or 0.0)
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:
                failed += 1
                print(f"FAILED: {rec.get('name')} ({result})")
if fuzz_runs:
    print(f"fuzz: {fuzz_runs} libFuzzer targets, {fuzz_seconds:.0f} s in all (counted below)")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
