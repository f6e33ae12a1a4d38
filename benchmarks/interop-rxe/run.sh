#!/usr/bin/env bash
# interop-rxe: every stock verbs pair (and a data-checked transfer) across Tandem <-> Linux's rxe in a QEMU TCG guest, both directions, as a compat list; ib_write_bw / ib_write_lat Tandem<->rxe vs rxe<->rxe (two guests) in the same run (emulated guests: not a speed goal).
# Called by scripts/bench.sh interop-rxe [--json] [--iters N]. Needs scripts/setup.sh's qemu-system-x86,
# busybox-static, kmod and the Debian kernel (scripts/rxe-peer.sh prepare). Results: benchmarks/RESULTS.md "## interop-rxe".
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${TANDEM_BUILD:-build}
exec /usr/bin/python3 benchmarks/interop-rxe/interop_rxe_bench.py --build "$B" "$@"
