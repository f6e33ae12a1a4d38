#!/usr/bin/env bash
# Builds the unit-test binaries (meson suite "unit") a second time, with clang
# and ASan+UBSan, into build-asan/ (or $TANDEM_ASAN_BUILD), and runs them;
# then one system test, perf_rnic, against sanitized workers, fabric and
# tandem-perf (real DPDK ports; a sanitizer report or a leak at exit fails
# the workers' clean stop). Only those targets are built, to keep CI short. Called by
# scripts/test.sh; prints "sanitized: N passed, M failed" last and exits
# non-zero if a test fails or the build does.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${TANDEM_ASAN_BUILD:-build-asan}
CC_=${SANITIZE_CC:-clang}
CXX_=${SANITIZE_CXX:-clang++}
log=/tmp/tandem-asan-build.$$.log
trap 'rm -f "$log"' EXIT

if ! command -v "$CXX_" >/dev/null; then
  echo "sanitized: $CXX_ not found (scripts/setup.sh installs clang)"; echo "sanitized: 0 passed, 1 failed"; exit 1
fi
# b_lundef=false: clang's sanitizer runtimes leave symbols to the executable.
if [[ ! -f $B/build.ninja ]]; then
  CC=$CC_ CXX=$CXX_ meson setup "$B" --buildtype=debugoptimized -Db_sanitize=address,undefined \
    -Db_lundef=false >"$log" 2>&1 || { cat "$log"; echo "sanitized: 0 passed, 1 failed"; exit 1; }
elif [[ -n $(find . -path './build*' -prune -o -name meson.build -newer "$B/build.ninja" -print -quit) ]]; then
  meson setup --reconfigure "$B" >"$log" 2>&1 || { cat "$log"; echo "sanitized: 0 passed, 1 failed"; exit 1; }
fi
# The unit suite's executables and what they run (a test's "depends", e.g.
# tandem-perf for perf-loopback), as ninja targets relative to the build dir.
mapfile -t targets < <(/usr/bin/python3 - "$B" <<'PY'
import json, os, subprocess, sys
b = os.path.realpath(sys.argv[1])
intro = lambda what: json.loads(subprocess.check_output(["meson", "introspect", b, what]))
files = {t["id"]: t["filename"] for t in intro("--targets")}
seen = set()
for t in intro("--tests"):
    if "unit" not in t["suite"] and not any(s.endswith(":unit") for s in t["suite"]):
        continue
    for f in [t["cmd"][0]] + [f for d in t.get("depends", []) for f in files.get(d, [])]:
        exe = os.path.relpath(os.path.realpath(f), b)
        if exe.startswith("..") or os.path.isabs(exe):
            continue  # not built here (e.g. bash running a script test)
        if exe not in seen:
            seen.add(exe)
            print(exe)
PY
)
if ((${#targets[@]} == 0)); then echo "sanitized: no unit tests found"; echo "sanitized: 0 passed, 1 failed"; exit 1; fi
system_test=perf_rnic
targets+=(apps/tandem-rnic/tandem-rnic apps/tandem-fabric/tandem-fabric apps/tandem-perf/tandem-perf)
if ! ninja -C "$B" "${targets[@]}" >"$log" 2>&1; then
  grep -E '^FAILED|error:' "$log" | head -20
  echo "sanitized: build failed"; echo "sanitized: 0 passed, 1 failed"; exit 1
fi
# Any UBSan report fails its test (UBSan alone would print and carry on).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
count() {  # "passed failed" of the last meson test run in $B
  /usr/bin/python3 - "$B" <<'PY'
import json, sys
p = f = 0
try:
    for line in open(sys.argv[1] + "/meson-logs/testlog.json"):
        r = json.loads(line)
        if r["result"] in ("OK", "EXPECTEDFAIL", "SKIP"):
            p += 1
        else:
            f += 1
            print(r["name"], r["result"], file=sys.stderr)
except OSError:
    f = 1
print(p, f)
PY
}
meson test -C "$B" --no-rebuild --suite unit --print-errorlogs --timeout-multiplier 4 "$@"
mrc=$?
read -r p f < <(count)
if ((mrc != 0)) && ((f == 0)); then f=1; fi
if (($# == 0)); then
  meson test -C "$B" --no-rebuild --print-errorlogs --timeout-multiplier 3 "$system_test"
  src=$?
  read -r sp sf < <(count)
  if ((src != 0)) && ((sf == 0)); then sf=1; fi
  p=$((p + sp)); f=$((f + sf))
fi
if ((mrc != 0)) && ((f == 0)); then f=1; fi
echo "sanitized: ${p} passed, ${f} failed"
((f == 0))
