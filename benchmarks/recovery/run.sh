#!/usr/bin/env bash
# recovery: tandem-rnic restart -> level-2 table replayed by tandem-dpu and ACTIVE, and agent restart -> both RNICs reconciled ACTIVE (ms, median), vs a standalone (YAML) worker start in the same run.
# Called by scripts/bench.sh recovery [--json] [--rounds N].
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${TANDEM_BUILD:-build}
exec /usr/bin/python3 benchmarks/recovery/recovery_bench.py \
  --dpu "$B/apps/tandem-dpu/tandem-dpu" --ctl "$B/apps/tandemctl/tandemctl" \
  --fabric "$B/apps/tandem-fabric/tandem-fabric" --rnic "$B/apps/tandem-rnic/tandem-rnic" \
  --app "$B/tests/system/rnic_host_app" "$@"
