#!/usr/bin/env bash
# rx-steer: cost per frame of handing a received frame to the lcore owning its QP (peek at the BTH destination QP, SPSC rte_ring, dequeue on the owner), two lcores, vs the same frames kept by the receiving lcore (peek only), same run.
# Called by scripts/bench.sh rx-steer [--json] [--seconds N].
set -euo pipefail
cd "$(dirname "$0")/../.."
trap 'rm -rf /var/run/dpdk/tandem-bench-steer-*' EXIT
exec "${TANDEM_BUILD:-build}/benchmarks/rx-steer/rx_steer_bench" "$@"
