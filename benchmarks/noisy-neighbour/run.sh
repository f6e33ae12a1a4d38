#!/usr/bin/env bash
# noisy-neighbour: a victim tenant's verified tandem-perf write_bw on a port, alone and while a hostile tenant on the same port runs each abuse of tests/system/hostile/ in turn; per abuse the victim's goodput over its goodput alone (goal >= 0.5 every row), worker deaths and victim bytes wrong (goal 0 each).
# Called by scripts/bench.sh noisy-neighbour [--json] [--seconds N] [--rounds N] [--only CASE,...]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${TANDEM_BUILD:-build}
export TANDEM_BUILD=$(cd "$B" && pwd)
exec /usr/bin/python3 benchmarks/noisy-neighbour/noisy_neighbour.py --build "$TANDEM_BUILD" "$@"
