#!/usr/bin/env bash
# Configures and builds Tandem into build/ (or $TANDEM_BUILD). Used by
# test.sh, demo.sh and bench.sh. Components join the build by having a folder
# with a meson.build (fs.exists), which meson does not watch, so an existing
# build is reconfigured when any meson.build is newer than it.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${TANDEM_BUILD:-build}
if [[ ! -f $B/build.ninja ]]; then
  meson setup "$B" --buildtype=debugoptimized >/tmp/tandem-meson.log 2>&1 || {
    cat /tmp/tandem-meson.log; exit 1; }
elif [[ -n $(find . -path './build*' -prune -o -name meson.build -newer "$B/build.ninja" -print -quit) ]]; then
  meson setup --reconfigure "$B" >/tmp/tandem-meson.log 2>&1 || { cat /tmp/tandem-meson.log; exit 1; }
fi
ninja -C "$B" "$@"
