#!/usr/bin/env python3
"""test_summary.py: prints the closing 'N passed, N failed, N skipped' line of a meson test
run from one or more meson-logs/testlog.json files, and exits 1 when any test failed (or no
test ran). Usage: test_summary.py build/meson-logs/testlog.json [more.json ...]"""
import json
import sys

passed = failed = skipped = 0
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            result = rec.get("result", "")
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:
                failed += 1
                print(f"FAILED: {rec.get('name')} ({result})")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
