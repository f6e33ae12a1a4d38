#!/usr/bin/env bash
# ICRC: CRC-32 cycles/byte, ours (common/wire, ISA-L) vs DPDK rte_net_crc SSE4.2, 64-4096 B
# Called by scripts/bench.sh icrc [--json] [--sizes 64,256 --mbytes N --reps N].
set -euo pipefail
cd "$(dirname "$0")/../.."
# The EAL (--no-huge --no-shconf) still makes its runtime dir; remove ours only.
trap 'rm -rf /var/run/dpdk/tandem-bench-icrc' EXIT
"${TANDEM_BUILD:-build}/benchmarks/icrc/icrc_bench" "$@"
