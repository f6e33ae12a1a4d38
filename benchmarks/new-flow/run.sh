#!/usr/bin/env bash
# New-flow setups/s through the slow path over the real rings: worker misses and punts, agent resolves from level 1, transaction, commit (txn-rings --part newflow)
# Called by scripts/bench.sh new-flow [--json] [--flows N --window N --cpus A,W|none ...]: the
# same program and options as benchmarks/txn-rings, new flows only; its baseline is the same
# path with in-memory queues in one process. Results: benchmarks/RESULTS.md "## Transactions".
set -euo pipefail
cd "$(dirname "$0")/../.."
exec bash benchmarks/txn-rings/run.sh --part newflow "$@"
