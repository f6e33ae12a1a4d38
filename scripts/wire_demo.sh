#!/usr/bin/env bash
# The wire part of the demo (scripts/demo.sh runs it last): real RoCEv2 packets on the wire
# format Tandem speaks. Runs setup and build, encodes a small RC conversation
# with tandem-wire (RDMA WRITE FIRST/MIDDLE/LAST, ACK, RDMA READ, SEND with
# immediate, one copy with a corrupted ICRC), decodes it, and shows tshark's
# view of the same file. Leaves only the pcap, at $DEMO_PCAP
# (default /tmp/tandem-demo-roce.pcap).
set -euo pipefail
cd "$(dirname "$0")/.."
PCAP=${DEMO_PCAP:-/tmp/tandem-demo-roce.pcap}
step() { printf '\n== %s\n' "$*"; }

step "setup"
./scripts/setup.sh
step "build tandem-wire"
# Folders join the build by existing (fs.exists in meson.build), which meson
# does not watch: reconfigure when any meson.build is newer than the build.
reconfigure_if_stale() {
  local dir=$1
  [[ -f $dir/build.ninja ]] || return 0
  if [[ -n $(find . -path './build*' -prune -o -name meson.build -newer "$dir/build.ninja" -print -quit) ]]; then
    meson setup --reconfigure "$dir" >/dev/null
  fi
}
reconfigure_if_stale "${TANDEM_BUILD:-build}"
if [[ -n ${TANDEM_BUILD:-} ]]; then
  ninja -C "$TANDEM_BUILD" apps/tandem-wire/tandem-wire | tail -1
else
  ./scripts/build.sh apps/tandem-wire/tandem-wire | tail -1
  TANDEM_BUILD=build
fi
WIRE=$TANDEM_BUILD/apps/tandem-wire/tandem-wire

TMP=$(mktemp -d /tmp/tandem-demo-XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# Host A (10.0.0.1, QP 0x11) talks to host B (10.0.0.2, QP 0x12). Each line is
# one packet; tandem-wire fills in lengths, checksums, pad and ICRC.
cat >"$TMP/conversation.jsonl" <<'SPEC'
# A writes 2560 bytes into B's memory: three packets, the last asks for an ACK.
{"opcode":"RC_RDMA_WRITE_FIRST","src":"10.0.0.1","dst":"10.0.0.2","sport":49169,"dqpn":"0x12","psn":100,"reth":{"va":"0x7f3a00010000","rkey":"0x1a2b","len":2560},"payload_len":1024}
{"opcode":"RC_RDMA_WRITE_MIDDLE","src":"10.0.0.1","dst":"10.0.0.2","sport":49169,"dqpn":"0x12","psn":101,"payload_len":1024}
{"opcode":"RC_RDMA_WRITE_LAST","src":"10.0.0.1","dst":"10.0.0.2","sport":49169,"dqpn":"0x12","psn":102,"payload_len":512,"ack_req":true}
# B acknowledges PSN 102 (syndrome 0x1f: ACK, unlimited credits), message 1.
{"opcode":"RC_ACKNOWLEDGE","src":"10.0.0.2","dst":"10.0.0.1","sport":49170,"dqpn":"0x11","psn":102,"aeth":{"syndrome":"0x1f","msn":1}}
# A reads 1500 bytes back; B answers with two read-response packets.
{"opcode":"RC_RDMA_READ_REQUEST","src":"10.0.0.1","dst":"10.0.0.2","sport":49169,"dqpn":"0x12","psn":103,"reth":{"va":"0x7f3a00010000","rkey":"0x1a2b","len":1500},"ack_req":true}
{"opcode":"RC_RDMA_READ_RESPONSE_FIRST","src":"10.0.0.2","dst":"10.0.0.1","sport":49170,"dqpn":"0x11","psn":103,"aeth":{"syndrome":"0x1f","msn":1},"payload_len":1024}
{"opcode":"RC_RDMA_READ_RESPONSE_LAST","src":"10.0.0.2","dst":"10.0.0.1","sport":49170,"dqpn":"0x11","psn":104,"aeth":{"syndrome":"0x1f","msn":2},"payload_len":476}
# A sends 64 bytes with immediate data; this copy is corrupted on the way...
{"opcode":"RC_SEND_ONLY_WITH_IMMEDIATE","src":"10.0.0.1","dst":"10.0.0.2","sport":49169,"dqpn":"0x12","psn":105,"imm":"0xcafe0001","se":true,"ack_req":true,"payload_len":64,"bad_icrc":true}
# ... so B drops it, and A's retransmission is acknowledged.
{"opcode":"RC_SEND_ONLY_WITH_IMMEDIATE","src":"10.0.0.1","dst":"10.0.0.2","sport":49169,"dqpn":"0x12","psn":105,"imm":"0xcafe0001","se":true,"ack_req":true,"payload_len":64}
{"opcode":"RC_ACKNOWLEDGE","src":"10.0.0.2","dst":"10.0.0.1","sport":49170,"dqpn":"0x11","psn":105,"aeth":{"syndrome":"0x1f","msn":3}}
SPEC

step "tandem-wire encode: the conversation as packets"
grep -v '^#' "$TMP/conversation.jsonl" | head -2
echo "  ... ($(grep -vc '^#' "$TMP/conversation.jsonl") packet specs)"
"$WIRE" encode "$TMP/conversation.jsonl" "$PCAP"

step "tandem-wire decode --summary (Tandem's parser: fields, ICRC check, drop reason)"
"$WIRE" decode --summary "$PCAP"

step "tandem-wire decode: one packet as JSON (the last ACK)"
"$WIRE" decode "$PCAP" | tail -1

step "tshark's view of the same file (Wireshark's InfiniBand dissector)"
if command -v tshark >/dev/null; then
  tshark -r "$PCAP" --disable-protocol rpcordma 2>/dev/null
  echo "tshark, ICRC as carried (it prints the 4 wire bytes, i.e. byte-swapped vs decode's value):"
  tshark -r "$PCAP" -T fields -e frame.number -e infiniband.bth.psn -e infiniband.invariant.crc \
    -E separator=' ' 2>/dev/null | sed 's/^/  /' | head -10
else
  echo "(tshark not installed: scripts/setup.sh installs it)"
fi

step "done"
echo "pcap: $PCAP (open it in Wireshark, or: $WIRE decode $PCAP)"
