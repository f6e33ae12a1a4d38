// libFuzzer target: parse_roce and tandem-wire's frame decoder on arbitrary
// bytes. Both must stay inside the buffer (ASan), and agree with each other;
// parse_roce's fast path for the common layout must give exactly what the
// general parser gives (or decline and leave the packet untouched).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/wire/roce_packet.h"
#include "common/wiretool/frame_decoder.h"
#include "tests/lib/roce_packet_diff.h"

using namespace tandem::common;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  // An exact-size heap copy, so any read past the end is caught.
  std::vector<uint8_t> buf(data, data + size);
  RocePacket pkt;
  const DropReason r = parse_roce(buf.data(), buf.size(), pkt);
  if (r == DropReason::kNone) {
    const std::size_t tail = pkt.payload_offset + pkt.payload_len + pkt.bth.pad + kIcrcLen;
    if (tail > size || pkt.icrc != pkt.icrc_computed || !opcode_known(pkt.bth.opcode)) std::abort();
  }
  ParseOptions lax;
  lax.check_icrc = false;
  lax.check_ip_checksum = false;
  parse_roce(buf.data(), buf.size(), pkt, lax);

  for (const ParseOptions& o : {ParseOptions{}, lax}) {
    RocePacket general, fast;
    const DropReason g = detail::parse_roce_general(buf.data(), buf.size(), general, o);
    DropReason f = DropReason::kNone;
    if (detail::parse_roce_common_layout(buf.data(), buf.size(), fast, o, f)) {
      if (f != g || !diff(fast, general).empty()) std::abort();
    } else if (!diff(fast, RocePacket{}).empty()) {
      std::abort();  // declined, but wrote into the packet
    }
  }

  const Json j = decode_frame(buf, 1, DecodeOptions{true});
  if (j["ok"].get<bool>() != (r == DropReason::kNone)) std::abort();
  if (r == DropReason::kNone) {
    if (!j.contains("icrc_ok") || !j["icrc_ok"].get<bool>()) std::abort();
    if (!j.contains("payload_len") || j["payload_len"].get<uint32_t>() != pkt.payload_len) std::abort();
    if (j["dqpn"].get<uint32_t>() != pkt.bth.dqpn || j["psn"].get<uint32_t>() != pkt.bth.psn) std::abort();
  }
  (void)summarize_packet(j);
  return 0;
}
