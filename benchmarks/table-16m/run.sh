#!/usr/bin/env bash
# Flow tables: bytes/entry and bulk lookups/s of the 16M level-1 mapping table and the level-2 table vs DPDK rte_hash
# Called by scripts/bench.sh table-16m [--json] [--entries N --l2-entries N --lookups N --reps N --store-rows N].
# The EAL runs with --no-huge (the baseline's memory is ordinary pages, like ours).
set -euo pipefail
cd "$(dirname "$0")/../.."
trap 'rm -rf /var/run/dpdk/tandem-bench-table16m' EXIT
"${TANDEM_BUILD:-build}/benchmarks/table-16m/table16m_bench" "$@"
