#!/usr/bin/env bash
# Runs every test suite: setup, build, then meson's suites (unit, conformance,
# dpdk, system), the unit suite again under ASan+UBSan (clang, build-asan/)
# and a short libFuzzer run of each parser. Exits non-zero if
# anything fails and ends with one summary line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh || { echo "test: setup failed"; exit 1; }
./scripts/build.sh >/tmp/tandem-build.log 2>&1 || {
  tail -50 /tmp/tandem-build.log; echo "test: build failed"; echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
failures=()

meson test -C build --print-errorlogs --timeout-multiplier 2 "$@"
mrc=$?
if [[ -f build/meson-logs/testlog.json ]]; then
  read -r p f < <(/usr/bin/python3 - <<'PY'
import json
p = f = 0
for line in open("build/meson-logs/testlog.json"):
    r = json.loads(line)
    if r["result"] in ("OK", "EXPECTEDFAIL", "SKIP"):
        p += 1
    else:
        f += 1
        print(r["name"], r["result"], file=__import__("sys").stderr)
print(p, f)
PY
)
  passed=$((passed + p)); failed=$((failed + f))
fi
if ((mrc != 0)) && ((failed == 0)); then failed=1; failures+=("meson test exited $mrc"); fi

# The unit suite again, built with clang and ASan+UBSan into build-asan/ (its
# own tests count in the summary; a build failure counts as one failure).
./scripts/test_sanitized.sh 2>&1 | tee /tmp/tandem-sanitized.log
if read -r sp sf < <(sed -nE 's/^sanitized: ([0-9]+) passed, ([0-9]+) failed$/\1 \2/p' /tmp/tandem-sanitized.log | tail -1); then
  passed=$((passed + sp)); failed=$((failed + sf))
  ((sf == 0)) || failures+=("sanitized unit tests: $sf")
else
  failed=$((failed + 1)); failures+=("sanitized unit tests (no summary)")
fi

# Fuzzers are built with clang (libFuzzer) outside meson, and run briefly.
if [[ -x tests/fuzz/run.sh ]]; then
  if tests/fuzz/run.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("fuzz"); fi
fi

for f in "${failures[@]}"; do echo "test: FAILED: $f"; done
echo "${passed} passed, ${failed} failed"
((failed == 0))
