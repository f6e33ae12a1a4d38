#!/usr/bin/env bash
# Transactions: new-flow installs/s through agent txn builder + RNIC channel + level-2 commit, merged vs per-flow vs bare table
# Called by scripts/bench.sh txn [--json] [--flows N --per-poll N --reps N].
set -euo pipefail
cd "$(dirname "$0")/../.."
"${TANDEM_BUILD:-build}/benchmarks/txn/txn_bench" "$@"
