#!/usr/bin/env bash
# Runs every libFuzzer target (tests/fuzz, built there with clang, ASan and
# UBSan) for a given time each: scripts/fuzz.sh --long SECONDS. Replays
# tests/fuzz/regressions/ first, then prints one line per target
# "TARGET: N executions, M crashes"; exits non-zero on any crash.
# Without --long: the short run scripts/test.sh does (FUZZ_SECONDS, 20 s).
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  --long)
    [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh --long SECONDS" >&2; exit 2; }
    exec tests/fuzz/run.sh --long "$2" ;;
  "") exec tests/fuzz/run.sh ;;
  *) echo "usage: scripts/fuzz.sh [--long SECONDS]" >&2; exit 2 ;;
esac
