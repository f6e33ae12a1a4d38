#!/usr/bin/env bash
# tx-pipeline: tandem-rnic transmit path (WR -> segment -> translate -> spray -> encapsulate -> ICRC -> tx_burst on net_null, one lcore) vs dpdk-testpmd io forwarding (and txonly) on net_null, Mpps; plus a no-transport floor row (same frames: template, patch, copy, ICRC, tx_burst).
# Also the headline row on 1 and 2 lcores (scaling_2_lcores, issue 21).
# Called by scripts/bench.sh tx-pipeline [--json] [--seconds N] [--scaling-pairs N].
set -euo pipefail
cd "$(dirname "$0")/../.."
exec /usr/bin/python3 benchmarks/tx-pipeline/tx_pipeline.py \
  --bench "${TANDEM_BUILD:-build}/benchmarks/tx-pipeline/tx_pipeline_bench" "$@"
