#!/usr/bin/env bash
# write-bw: tandem-perf write_bw goodput (MTU 4096) through tandem-fabric + two tandem-rnic workers vs dpdk-testpmd txonly -> rxonly over the same memif links and fabric at the same frame size, same run.
# Called by scripts/bench.sh write-bw [--json] [--seconds N] [--size BYTES] [--qps N] [--cores A,B,FABRIC]
# [--rows ours,baseline,direct,loopback] [--rnic-flag=--FLAG=VALUE]; dpdk-testpmd comes from PATH (--testpmd).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${TANDEM_BUILD:-build}
exec /usr/bin/python3 benchmarks/write-bw/write_bw_bench.py \
  --fabric "$B/apps/tandem-fabric/tandem-fabric" --rnic "$B/apps/tandem-rnic/tandem-rnic" \
  --perf "$B/apps/tandem-perf/tandem-perf" --loopback "$B/benchmarks/write-bw/perf_loopback_worker" "$@"
