#!/usr/bin/env bash
# fleet: etcd write -> committed on the RNIC involved (p50/p99) with N agents fed from a 3-member etcd, a 10,000-mapping burst to every agent, and a migrated vNIC carrying traffic again; vs the same changes by tandemctl to one agent in the same run.
# Called by scripts/bench.sh fleet [--json] [--agents N] [--rounds N].
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${TANDEM_BUILD:-build}
exec /usr/bin/python3 benchmarks/fleet/fleet_bench.py \
  --dpu "$B/apps/tandem-dpu/tandem-dpu" --ctl "$B/apps/tandemctl/tandemctl" \
  --fabric "$B/apps/tandem-fabric/tandem-fabric" --rnic "$B/apps/tandem-rnic/tandem-rnic" \
  --app "$B/tests/system/rnic_host_app" --probe "$B/benchmarks/fleet/fleet_probe" "$@"
