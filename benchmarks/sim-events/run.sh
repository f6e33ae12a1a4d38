#!/usr/bin/env bash
# tandem-sim simulated events/s for a scenario (real transport core on every host) vs the bare event queue.
# Usage: benchmarks/sim-events/run.sh [SCENARIO] [--json]   (default scenario reorder-4paths;
# binaries from ${TANDEM_BUILD:-build})
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${TANDEM_BUILD:-build}"
bin="$build/benchmarks/sim-events/bench_sim_events"
if [[ ! -x "$bin" ]]; then
  ninja -C "$build" benchmarks/sim-events/bench_sim_events >/dev/null
fi
exec "$bin" "$@"
