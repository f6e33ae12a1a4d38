#!/usr/bin/env bash
# rx-pipeline: tandem-rnic receive path (mbuf -> parse/ICRC -> ingress check (the QP's route) -> reorder/place -> ACK encap -> tx_burst on net_null, one lcore) vs dpdk-testpmd io forwarding on net_null copy=1, with the floor (mbuf fill + headers + burst ICRC + free), Mpps.
# Also the 64 B row on 1 and 2 lcores (scaling_2_lcores, issue 21).
# Called by scripts/bench.sh rx-pipeline [--json] [--seconds N] [--scaling-pairs N].
set -euo pipefail
cd "$(dirname "$0")/../.."
exec /usr/bin/python3 benchmarks/rx-pipeline/rx_pipeline.py \
  --bench "${TANDEM_BUILD:-build}/benchmarks/rx-pipeline/rx_pipeline_bench" "$@"
