// The CM conformance test's tool over rnic/cm's encoder and decoder:
//   cm_mad_tool encode OUT.pcap   one RoCEv2 UD frame to QP1 per CM message
//                                 (REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ,
//                                 SIDR_REP) with the field values printed as JSON
//   cm_mad_tool decode IN.pcap    per frame: the parse and MAD verdicts and the
//                                 decoded fields, as JSON lines
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/pcap/pcap_reader.h"
#include "common/pcap/pcap_writer.h"
#include "common/wire/roce_packet.h"
#include "rnic/cm/mad.h"

using namespace tandem;
using namespace tandem::rnic::cm;

namespace {

std::string json_of(const CmMsg& m) {
  char b[1024];
  std::snprintf(b, sizeof b,
                "{\"attr\":\"%s\",\"tid\":%llu,\"local_comm_id\":%u,\"remote_comm_id\":%u,\"service_id\":%llu,"
                "\"ca_guid\":%llu,\"qpn\":%u,\"starting_psn\":%u,\"responder_resources\":%u,\"initiator_depth\":%u,"
                "\"pkey\":%u,\"path_mtu\":%u,\"retry_count\":%u,\"rnr_retry_count\":%u,\"max_cm_retries\":%u,"
                "\"remote_cm_timeout\":%u,\"local_cm_timeout\":%u,\"local_gid_ip\":%u,\"remote_gid_ip\":%u,"
                "\"reason\":%u,\"msg\":%u,\"service_timeout\":%u,\"sidr_status\":%u,\"qkey\":%u,\"hop_limit\":%u,"
                "\"priv0\":%u}",
                std::string(attr_name(m.hdr.attr)).c_str(), static_cast<unsigned long long>(m.hdr.tid),
                m.local_comm_id, m.remote_comm_id, static_cast<unsigned long long>(m.service_id),
                static_cast<unsigned long long>(m.ca_guid), m.qpn, m.starting_psn, m.responder_resources,
                m.initiator_depth, m.pkey, m.path_mtu, m.retry_count, m.rnr_retry_count, m.max_cm_retries,
                m.remote_cm_timeout, m.local_cm_timeout, ipv4_of_gid(m.local_gid), ipv4_of_gid(m.remote_gid),
                static_cast<unsigned>(m.reason), static_cast<unsigned>(m.msg), m.service_timeout, m.sidr_status,
                m.qkey, m.hop_limit, m.priv_len ? m.priv[0] : 0);
  return b;
}

std::vector<uint8_t> frame(const uint8_t* mad) {
  common::RocePacket p;
  p.eth.src = {2, 0, 0, 0, 0, 1};
  p.eth.dst = {2, 0, 0, 0, 0, 2};
  p.ip.src = 0x0A000001;
  p.ip.dst = 0x0A000002;
  p.udp.sport = 0xC000;
  p.bth.opcode = 0x64;  // UD_SEND_ONLY
  p.bth.pkey = 0xFFFF;
  p.bth.dqpn = kGsiQpn;
  p.bth.psn = 1;
  p.deth.qkey = kGsiQkey;
  p.deth.src_qp = kGsiQpn;
  std::vector<uint8_t> out(512);
  out.resize(common::build_roce(p, std::span<const uint8_t>(mad, kMadLen), out.data(), out.size()));
  return out;
}

int encode(const char* path) {
  common::PcapWriter w(path);
  uint32_t n = 0;
  for (Attr a : {Attr::kReq, Attr::kMra, Attr::kRej, Attr::kRep, Attr::kRtu, Attr::kDreq, Attr::kDrep,
                 Attr::kSidrReq, Attr::kSidrRep}) {
    CmMsg m;
    m.hdr.attr = a;
    m.hdr.tid = 0x5400000000000000ull + ++n;
    m.local_comm_id = 0x1000 + n;
    m.remote_comm_id = 0x2000 + n;
    m.service_id = service_id(kPsTcp, 7174);
    m.ca_guid = 0x0200000000000001ull;
    m.qpn = 0x10001;
    m.starting_psn = 0x123456;
    m.responder_resources = 4;
    m.initiator_depth = 2;
    m.remote_cm_timeout = 16;
    m.local_cm_timeout = 17;
    m.retry_count = 7;
    m.rnr_retry_count = 6;
    m.max_cm_retries = 8;
    m.pkey = 0xFFFF;
    m.path_mtu = 3;
    m.local_gid = gid_of_ipv4(0xC0A80702);
    m.remote_gid = gid_of_ipv4(0xC0A80701);
    m.hop_limit = 64;
    m.reason = RejReason::kInvalidServiceId;
    m.msg = MsgKind::kRep;
    m.service_timeout = 24;
    m.qkey = a == Attr::kSidrRep ? 0x01234567 : 0;
    m.priv[0] = 0xAB;
    m.priv_len = 1;
    uint8_t mad[kMadLen];
    encode_mad(m, mad);
    const std::vector<uint8_t> f = frame(mad);
    w.write(n * 1000ull, f);
    std::printf("%s\n", json_of(m).c_str());
  }
  w.close();
  return 0;
}

int decode(const char* path) {
  common::PcapFile file(path);
  common::PcapReader& r = file.reader();
  common::PcapRecord rec;
  while (r.next(rec)) {
    common::RocePacket p;
    const common::DropReason why = common::parse_roce(rec.data.data(), rec.data.size(), p);
    if (why != common::DropReason::kNone) {
      std::printf("{\"parse\":\"%s\"}\n", std::string(common::drop_reason_name(why)).c_str());
      continue;
    }
    if (p.bth.dqpn != kGsiQpn || p.deth.qkey != kGsiQkey) {
      std::printf("{\"parse\":\"ok\",\"mad\":\"not_gsi\"}\n");
      continue;
    }
    CmMsg m;
    const MadError e = decode_mad(rec.data.data() + p.payload_offset, p.payload_len, m);
    if (e != MadError::kNone) {
      std::printf("{\"parse\":\"ok\",\"mad\":\"%s\"}\n", std::string(mad_error_name(e)).c_str());
      continue;
    }
    std::printf("{\"parse\":\"ok\",\"mad\":\"ok\",\"msg\":%s}\n", json_of(m).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: cm_mad_tool encode|decode FILE.pcap\n");
    return 2;
  }
  try {
    if (std::strcmp(argv[1], "encode") == 0) return encode(argv[2]);
    if (std::strcmp(argv[1], "decode") == 0) return decode(argv[2]);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "cm_mad_tool: %s\n", ex.what());
    return 1;
  }
  return 2;
}
