#!/usr/bin/env bash
# verbs-perftest: Debian's stock ib_write_bw (64 KiB, 4 QPs) and ib_write_lat (2 B) on the drop-in libibverbs vs tandem-perf write_bw / write_lat with the same sizes, QPs and workers, alternating in one run.
# Called by scripts/bench.sh verbs-perftest [--json] [--seconds N] [--rounds N] [--qps N] [--size BYTES]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${TANDEM_BUILD:-build}
exec /usr/bin/python3 benchmarks/verbs-perftest/verbs_perftest_bench.py --build "$B" "$@"
