#!/usr/bin/env bash
# Runs one benchmark: scripts/bench.sh NAME [--json] [args...], or lists them:
# scripts/bench.sh list. A benchmark is a folder benchmarks/NAME/ holding a
# run.sh whose first comment line describes it; run.sh gets --json and the
# other args, and with --json prints exactly one JSON object
# {"bench","unit","ours","baseline","baseline_name","ratio",...}.
# Builds first with scripts/build.sh (build/), or with ninja -C $TANDEM_BUILD
# when that is set (run.sh finds its binaries under ${TANDEM_BUILD:-build}).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/bench.sh list | NAME [--json] [args...]"
  echo "  list          name and describe every benchmark (benchmarks/*/run.sh)"
  echo "  NAME          build, then run benchmarks/NAME/run.sh"
  echo "  --json        the benchmark prints one JSON object instead of a table"
  echo "  args          passed on to run.sh (see: scripts/bench.sh NAME --help)"
}

describe() {  # first comment line of a run.sh, without the '#'
  sed -n '/^#!/d; /^#/{s/^#[[:space:]]*//; p; q}' "$1"
}

list() {
  local found=0 d
  for d in benchmarks/*/; do
    [[ -f $d/run.sh ]] || continue
    found=1
    printf '%-18s %s\n' "$(basename "$d")" "$(describe "$d/run.sh")"
  done
  ((found)) || echo "no benchmarks yet (benchmarks/NAME/run.sh)"
}

(($# >= 1)) || { usage >&2; exit 2; }
case $1 in
  list) list; exit 0 ;;
  -h|--help|help) usage; echo; list; exit 0 ;;
esac

name=$1; shift
if [[ ! $name =~ ^[A-Za-z0-9._-]+$ || ! -f benchmarks/$name/run.sh ]]; then
  echo "bench: no benchmark '$name'; these exist:" >&2
  list >&2
  exit 2
fi

json=0
for a in "$@"; do [[ $a == --json ]] && json=1; done
log=$(mktemp /tmp/tandem-bench-build-XXXXXX.log)
trap 'rm -f "$log"' EXIT
# Folders join the build by existing (fs.exists in meson.build), which meson
# does not watch: reconfigure when any meson.build is newer than the build.
reconfigure_if_stale() {
  local dir=$1
  [[ -f $dir/build.ninja ]] || return 0
  if [[ -n $(find . -path './build*' -prune -o -name meson.build -newer "$dir/build.ninja" -print -quit) ]]; then
    meson setup --reconfigure "$dir" >/dev/null
  fi
}
reconfigure_if_stale "${TANDEM_BUILD:-build}"
# Keep going past other components' build errors: the benchmark's own binary
# may still build, and run.sh fails clearly if it did not.
built=0
if [[ -n ${TANDEM_BUILD:-} ]]; then
  ninja -C "$TANDEM_BUILD" -k 0 >"$log" 2>&1 && built=1
else
  ./scripts/build.sh -k 0 >"$log" 2>&1 && built=1
fi
if ((!built)); then
  grep -E '^FAILED:' "$log" | head -5 >&2
  echo "bench: warning: the build had errors (above); running $name anyway" >&2
fi
if ((json)); then
  # Hold the benchmark to its contract: exactly one JSON object with the keys.
  out=$(bash "benchmarks/$name/run.sh" "$@")
  printf '%s\n' "$out" | /usr/bin/python3 -c '
import json, sys
text = sys.stdin.read().strip()
try:
    obj = json.loads(text)
except ValueError as e:
    sys.exit(f"bench: {sys.argv[1]} --json did not print one JSON object ({e})")
missing = [k for k in ("bench", "unit", "ours", "baseline", "baseline_name", "ratio") if k not in obj]
if not isinstance(obj, dict) or missing:
    sys.exit(f"bench: {sys.argv[1]} --json output lacks {missing}")
print(json.dumps(obj))
' "$name"
else
  echo "== $name: $(describe "benchmarks/$name/run.sh")"
  bash "benchmarks/$name/run.sh" "$@"
fi
