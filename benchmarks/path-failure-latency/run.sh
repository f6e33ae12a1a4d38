#!/usr/bin/env bash
# Latency-bound traffic across a path failure (issue 33): one WRITE/READ in flight, p50/p99/max and QPs in error with a dead path over the same without, in tandem-sim (exact) and in the lab (stock ib_{write,read}_lat, fabric path 0 failed 1.5 s in).
# Usage: benchmarks/path-failure-latency/run.sh [--json] [--no-lab] [--iters N] [--progs P1,P2]
# The same-run baseline is the same scenario (sim) or the same perftest run
# (lab) with no path failing. Sim: latency-path-failure (16 paths, one dead)
# and latency-read-path-failure (the lab's 16 ports on 4 paths, one dead),
# policy rr-credit (the lab's). Lab: tandem-fabric (4 paths, one 20 us
# longer, one losing 1 %) and two tandem-rnic workers (round_robin, credit),
# perftest's -n N iterations (default 3000) of 2 B, path 0 failed 1.5 s after
# the client starts and set up again after the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python3 benchmarks/path-failure-latency/path_failure_latency_bench.py "$@"
