#!/usr/bin/env bash
# Simulated events per second of tandem-sim against the bare event queue.
# Usage: benchmarks/sim-events/run.sh [SCENARIO] [--json]   (BUILD_DIR defaults to build)
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${BUILD_DIR:-build}"
bin="$build/benchmarks/sim-events/bench_sim_events"
if [[ ! -x "$bin" ]]; then
  ninja -C "$build" benchmarks/sim-events/bench_sim_events >/dev/null
fi
exec "$bin" "$@"
