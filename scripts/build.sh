#!/usr/bin/env bash
# Configures (once) and builds Tandem into build/. Used by test.sh, demo.sh and bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/build.ninja ]]; then
  meson setup build --buildtype=debugoptimized >/tmp/tandem-meson.log 2>&1 || {
    cat /tmp/tandem-meson.log; exit 1; }
fi
ninja -C build "$@"
