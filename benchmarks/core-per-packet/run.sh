#!/usr/bin/env bash
# Transport core: ns per RDMA WRITE packet, send and receive side, vs memcpy + header write
# Called by scripts/bench.sh core-per-packet [--json] [--payload 1024 --pkts N --reps N --mem-mb N].
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${TANDEM_BUILD:-build}/benchmarks/core-per-packet/core_per_packet_bench" "$@"
