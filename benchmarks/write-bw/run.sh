#!/usr/bin/env bash
# write-bw: tandem-perf write_bw Gb/s through tandem-fabric + two tandem-rnic workers vs the same tool over a loopback worker (memcpy, no transport) in the same run.
# Called by scripts/bench.sh write-bw [--json] [--seconds N] [--size BYTES] [--qps N].
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${TANDEM_BUILD:-build}
exec /usr/bin/python3 benchmarks/write-bw/write_bw_bench.py \
  --fabric "$B/apps/tandem-fabric/tandem-fabric" --rnic "$B/apps/tandem-rnic/tandem-rnic" \
  --perf "$B/apps/tandem-perf/tandem-perf" --loopback "$B/benchmarks/write-bw/perf_loopback_worker" "$@"
