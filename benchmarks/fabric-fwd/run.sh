#!/usr/bin/env bash
# fabric-fwd: tandem-fabric forwarding rate (Mpps, one lcore, zero impairment,
# 4 paths) vs dpdk-testpmd --forward-mode=io on the same vdev in the same run.
# Called by scripts/bench.sh fabric-fwd [--json] [--seconds N].
set -euo pipefail
cd "$(dirname "$0")/../.."
exec /usr/bin/python3 benchmarks/fabric-fwd/fabric_fwd_bench.py \
  --fabric "${TANDEM_BUILD:-build}/apps/tandem-fabric/tandem-fabric" "$@"
