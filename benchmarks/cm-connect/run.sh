#!/usr/bin/env bash
# cm-connect: RC connections set up through rdma_cm (the worker's CM, MADs on QP1) vs the same number set up over a TCP exchange of QPN/PSN/GID, same workers and libraries: connections/s and p50/p99 set-up latency.
# Called by scripts/bench.sh cm-connect [--json] [--connections N] [--parallel K] [--rounds R]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${TANDEM_BUILD:-build}
exec /usr/bin/python3 benchmarks/cm-connect/cm_connect_bench.py --build "$B" "$@"
