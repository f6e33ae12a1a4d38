#!/usr/bin/env bash
# The lab in a box, about a minute once built: two hosts' RNIC workers
# (tandem-rnic) through tandem-fabric with 4 paths of different delays,
# tandem-perf write_bw --verify with per-packet spraying and credit-based CC,
# a path failed and healed mid-run; then the whole system: tandem-dpu programs
# both workers over its channels, tenants and vNICs made with tandemctl, two
# tenants' traffic at once and a third tenant denied; then the same transport
# in tandem-sim (go-back-N vs receiver-side reordering), then the wire format as
# tshark sees it. Everything it starts is stopped and removed on exit or Ctrl-C.
#   DEMO_SECONDS=24 DEMO_SPRAY=round_robin DEMO_CC=credit ./scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n######## %s\n' "$*"; }

step "1/6 setup (packages, hugepages)"
./scripts/setup.sh
step "2/6 build (first time: several minutes on 2 cores)"
./scripts/build.sh | tail -1
B=${TANDEM_BUILD:-build}

step "3/6 the lab: tandem-fabric + 2 x tandem-rnic + tandem-perf"
/usr/bin/python3 scripts/lab_demo.py "$B" --seconds "${DEMO_SECONDS:-24}" \
  --spray "${DEMO_SPRAY:-round_robin}" --cc "${DEMO_CC:-credit}"

step "4/6 the whole system: tandem-dpu + tandemctl + the two workers in DPU mode"
/usr/bin/python3 scripts/dpu_demo.py "$B"

step "5/6 the same transport core in the simulator: tandem-sim run reorder-4paths"
"$B/apps/tandem-sim/tandem-sim" run reorder-4paths

step "6/6 the wire: RoCEv2 packets built by tandem-wire, checked by tandem-wire and tshark"
TANDEM_BUILD=$B ./scripts/wire_demo.sh 2>&1 | sed -n '/tandem-wire decode --summary/,$p'
