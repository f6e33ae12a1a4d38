#!/usr/bin/env bash
# trace-overhead: the RX and TX pipelines with tracing off, a rule matching nothing, a rule matching every packet, against the same run's pipelines built without the trace code path (CPU ns per packet, ratios).
# Called by scripts/bench.sh trace-overhead [--json] [--seconds N] [--rounds N].
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${TANDEM_BUILD:-build}
exec /usr/bin/python3 benchmarks/trace-overhead/trace_overhead.py \
  --rx "$B/benchmarks/rx-pipeline/rx_pipeline_bench" --tx "$B/benchmarks/tx-pipeline/tx_pipeline_bench" "$@"
