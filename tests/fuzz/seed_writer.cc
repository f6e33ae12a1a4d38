// Writes a small seed corpus for the fuzzers: one well-formed RoCEv2 frame per
// opcode (plus VLAN and VXLAN variants) for parse_roce, and a few pcap files
// for the reader. Usage: seed_writer FRAME_DIR PCAP_DIR
#include <cstdio>
#include <string>
#include <vector>

#include "common/pcap/pcap_writer.h"
#include "common/wire/roce_packet.h"

using namespace tandem::common;

namespace {

void put(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}

std::vector<uint8_t> frame(uint8_t op, std::size_t payload_len, bool vlan, bool vxlan) {
  RocePacket p;
  p.eth.src = {2, 0, 0, 0, 0, 1};
  p.eth.dst = {2, 0, 0, 0, 0, 2};
  p.eth.has_vlan = vlan;
  p.eth.vlan_tci = 100;
  p.ip.src = 0x0A000001;
  p.ip.dst = 0x0A000002;
  p.udp.sport = 0xC001;
  p.bth.opcode = op;
  p.bth.dqpn = 0x11;
  p.bth.psn = 7;
  p.reth = {0x1000, 0x42, static_cast<uint32_t>(payload_len)};
  p.aeth = {0x1F, 3};
  p.has_outer = vxlan;
  p.outer.ip.src = 0xC0A80001;
  p.outer.ip.dst = 0xC0A80002;
  p.outer.vxlan.vni = 5001;
  std::vector<uint8_t> payload(opcode_has(op, kOpPayload) ? payload_len : 0, 0x5A);
  std::vector<uint8_t> out(payload.size() + 256);
  out.resize(build_roce(p, payload, out.data(), out.size()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s FRAME_DIR PCAP_DIR\n", argv[0]);
    return 2;
  }
  const std::string frames = argv[1], pcaps = argv[2];
  std::vector<std::vector<uint8_t>> all;
  for (int op = 0; op < 256; ++op) {
    if (!opcode_known(static_cast<uint8_t>(op))) continue;
    all.push_back(frame(static_cast<uint8_t>(op), 13, false, false));
  }
  all.push_back(frame(IBV_OPCODE_RC_SEND_ONLY, 3, true, false));
  all.push_back(frame(IBV_OPCODE_RC_RDMA_WRITE_ONLY, 40, false, true));
  for (std::size_t i = 0; i < all.size(); ++i) put(frames + "/frame" + std::to_string(i), all[i]);

  for (bool nano : {false, true}) {
    const std::string path = pcaps + (nano ? "/nano.pcap" : "/micro.pcap");
    PcapWriter w(path, nano);
    for (std::size_t i = 0; i < all.size(); i += nano ? 2 : 3) w.write(1'000'000'000ull * i + 17, all[i]);
    w.close();
  }
  std::printf("seeds: %zu frames, 2 pcaps\n", all.size());
  return 0;
}
