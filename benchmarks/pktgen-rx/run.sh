#!/usr/bin/env bash
# pktgen-rx: pktgen replaying the tandem-perf sink profile (64 B and 1 KiB WRITEs) and malformed.pcap into tandem-rnic --bench-any-psn over memif (accepted / dropped Mpps, loss) vs dpdk-testpmd rxonly on the same link under the same pktgen; needs PKTGEN=/path/to/pktgen.
# Called by scripts/bench.sh pktgen-rx [--json] [--seconds N]. docs/pktgen.md says how to build pktgen.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ -z ${PKTGEN:-} || ! -x ${PKTGEN:-} ]]; then
  cat >&2 <<'MSG'
pktgen-rx: set PKTGEN=/path/to/pktgen (the dpdk-pktgen binary). pktgen is not in Debian: build
pktgen-dpdk 23.03.x (the pktgen/Pktgen-DPDK project's sources) against Debian's libdpdk-dev
(22.11), with the one-line memif MTU fix, as docs/pktgen.md "Building pktgen" shows, then:
  PKTGEN=/work/pktgen/build/app/pktgen scripts/bench.sh pktgen-rx --json
MSG
  exit 2
fi
exec /usr/bin/python3 benchmarks/pktgen-rx/pktgen_rx.py --pktgen "$PKTGEN" --build "${TANDEM_BUILD:-build}" "$@"
