#!/usr/bin/env bash
# Transactions over the real DPU<->RNIC shared-memory rings, agent and worker processes: commit latency (1/16 entries) vs rte_ring ping-pong, bulk entries/s and punted new flows/s vs the same path in memory
# Called by scripts/bench.sh txn-rings [--json] [--part all|latency|bulk|newflow]
# [--samples N --bulk-entries N --bulk-txn N --flows N --window N --cpus A,W|none --dir DIR]
# [--no-pipeline (one txn in flight; tandem-dpu pipelines) --no-revalidate (skip tandem-dpu's
# revalidation of committed punt resolutions) --no-baseline (newflow: skip the in-memory run, to
# profile the two ring processes alone)].
# Both processes busy-poll; not pinned by default (--cpus A,W pins them).
set -euo pipefail
cd "$(dirname "$0")/../.."
exe="${TANDEM_BUILD:-build}/benchmarks/txn-rings/txn_rings_bench"
[[ -x $exe ]] || { echo "txn-rings: $exe not built (needs DPDK)" >&2; exit 1; }
exec "$exe" "$@"
