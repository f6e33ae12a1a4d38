#include "common/wiretool/frame_decoder.h"

#include <algorithm>
#include <cstdio>

#include "common/wire/entropy.h"
#include "common/wire/icrc.h"
#include "common/wire/roce_packet.h"

namespace tandem::common {

namespace {

std::string ipv4_string(uint32_t a) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xFF, (a >> 8) & 0xFF,
                a & 0xFF);
  return buf;
}

std::string mac_string(const MacAddr& m) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                m[5]);
  return buf;
}

std::string hex32(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string hex_bytes(const uint8_t* p, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 0xF];
  }
  return s;
}

// Where the walk through one Eth/IPv4/UDP stack got to.
struct L4Walk {
  bool udp = false;          // UDP header read; `off` is past it
  std::size_t off = 0;
  std::size_t ip_off = 0;
  std::size_t end = 0;       // end of the IP datagram, or of the capture if cut
  bool complete = false;     // the whole IP datagram was captured
};

// Adds Ethernet, IPv4 and UDP fields of data[off..len) to `j`, stopping at
// the first layer whose bytes are missing or that is not the expected one.
L4Walk walk_l2_l4(const uint8_t* data, std::size_t len, std::size_t off, Json& j) {
  L4Walk w;
  bool ok = false;
  const EthHeader eth = read_eth(data + off, len - off, &ok);
  if (!ok) return w;
  j["dst_mac"] = mac_string(eth.dst);
  j["src_mac"] = mac_string(eth.src);
  if (eth.has_vlan) {
    j["vlan"] = eth.vlan_tci & 0x0FFF;
    if (eth.vlan_tci >> 12) j["vlan_pcp"] = eth.vlan_tci >> 13;
  }
  if (eth.ethertype != kEtherTypeIpv4) {
    j["ethertype"] = eth.ethertype;
    return w;
  }
  off += eth.size();
  if (len - off < kIpv4HdrLen || (data[off] >> 4) != 4) return w;
  const Ipv4Header ip = read_ipv4(data + off);
  const std::size_t ihl = std::size_t{ip.ihl} * 4;
  j["src"] = ipv4_string(ip.src);
  j["dst"] = ipv4_string(ip.dst);
  j["tos"] = ip.tos;
  j["ttl"] = ip.ttl;
  if (ip.proto != kIpProtoUdp) j["ip_proto"] = ip.proto;
  if (ihl < kIpv4HdrLen || ip.total_len < ihl + kUdpHdrLen || len - off < ihl ||
      ip.proto != kIpProtoUdp) {
    return w;
  }
  w.ip_off = off;
  w.complete = len - off >= ip.total_len;
  w.end = off + std::min<std::size_t>(ip.total_len, len - off);
  off += ihl;
  if (w.end - off < kUdpHdrLen) return w;
  const UdpHeader udp = read_udp(data + off);
  j["sport"] = udp.sport;
  j["dport"] = udp.dport;
  w.udp = true;
  w.off = off + kUdpHdrLen;
  return w;
}

}  // namespace

Json decode_frame(std::span<const uint8_t> frame, std::size_t index, const DecodeOptions& opts) {
  const uint8_t* data = frame.data();
  const std::size_t len = frame.size();
  RocePacket pkt;
  const DropReason verdict = parse_roce(data, len, pkt);

  Json j;
  j["index"] = index;
  j["ok"] = verdict == DropReason::kNone;
  j["drop_reason"] = verdict == DropReason::kNone ? Json(nullptr)
                                                  : Json(std::string(drop_reason_name(verdict)));
  j["len"] = len;

  L4Walk w = walk_l2_l4(data, len, 0, j);
  if (w.udp && j["dport"] == kVxlanUdpPort) {
    if (w.end - w.off < kVxlanHdrLen) return j;
    Json outer = j;  // the fields so far belong to the underlay
    for (const char* k : {"index", "ok", "drop_reason", "len"}) outer.erase(k);
    outer["vni"] = read_vxlan(data + w.off).vni;
    Json inner;
    for (const char* k : {"index", "ok", "drop_reason", "len"}) inner[k] = j[k];
    inner["outer"] = std::move(outer);
    j = std::move(inner);
    // The inner frame ends where the outer datagram does.
    const bool outer_complete = w.complete;
    w = walk_l2_l4(data, w.end, w.off + kVxlanHdrLen, j);
    w.complete = w.complete && outer_complete;
  }
  if (!w.udp || j["dport"] != kRoceUdpPort) return j;

  std::size_t off = w.off;
  if (w.end - off < kBthLen) return j;
  const Bth bth = read_bth(data + off);
  off += kBthLen;
  j["opcode"] = bth.opcode;
  j["opcode_name"] = opcode_known(bth.opcode) ? Json(std::string(opcode_info(bth.opcode).name))
                                              : Json(nullptr);
  j["dqpn"] = bth.dqpn;
  j["psn"] = bth.psn;
  j["ack_req"] = bth.ack_req;
  if (bth.resv7) j["resv7"] = bth.resv7;  // Tandem's IRN path feedback (rnic/core/irn_wire.h)
  j["se"] = bth.se;
  j["pkey"] = bth.pkey;
  j["fecn"] = bth.fecn;
  j["becn"] = bth.becn;
  if (bth.resv7 != 0) j["resv7"] = bth.resv7;  // reserved: only shown when set (Tandem's SACK mark)

  // The ICRC sits in the last 4 bytes of the datagram whatever the opcode.
  const bool have_icrc = w.complete && w.end - off >= kIcrcLen;
  if (opcode_known(bth.opcode)) {
    const uint32_t f = opcode_info(bth.opcode).flags;
    const std::size_t limit = have_icrc ? w.end - kIcrcLen : w.end;
    auto fits = [&](std::size_t n) { return limit - off >= n; };
    bool all = true;
    if ((f & kOpDeth) && (all = all && fits(kDethLen))) {
      Deth d;
      read_deth_into(data + off, d);
      j["deth"] = {{"qkey", d.qkey}, {"src_qp", d.src_qp}};
      off += kDethLen;
    }
    if ((f & kOpReth) && (all = all && fits(kRethLen))) {
      const Reth r = read_reth(data + off);
      j["reth"] = {{"va", r.va}, {"rkey", r.rkey}, {"len", r.len}};
      off += kRethLen;
    }
    if ((f & kOpAtomicEth) && (all = all && fits(kAtomicEthLen))) {
      const AtomicEth a = read_atomic_eth(data + off);
      j["atomic"] = {{"va", a.va}, {"rkey", a.rkey}, {"swap_add", a.swap_add}, {"compare", a.compare}};
      off += kAtomicEthLen;
    }
    if ((f & kOpAeth) && (all = all && fits(kAethLen))) {
      const Aeth a = read_aeth(data + off);
      j["aeth"] = {{"syndrome", a.syndrome}, {"msn", a.msn}};
      off += kAethLen;
    }
    if ((f & kOpAtomicAck) && (all = all && fits(kAtomicAckLen))) {
      j["atomic_ack"] = load_be64(data + off);
      off += kAtomicAckLen;
    }
    if ((f & kOpImm) && (all = all && fits(kImmLen))) {
      j["imm"] = load_be32(data + off);
      off += kImmLen;
    }
    if ((f & kOpCnp) && (all = all && fits(kCnpPadLen))) off += kCnpPadLen;
    if (all && have_icrc && limit - off >= bth.pad) {
      const std::size_t payload_len = limit - off - bth.pad;
      j["payload_len"] = payload_len;
      if (opts.payload_hex) j["payload_hex"] = hex_bytes(data + off, payload_len);
    }
  }
  if (have_icrc) {
    const uint32_t carried = load_le32(data + w.end - kIcrcLen);
    const uint32_t computed = roce_icrc(data + w.ip_off, w.end - kIcrcLen - w.ip_off);
    j["icrc"] = hex32(carried);
    j["icrc_ok"] = carried == computed;
  }
  return j;
}

std::string summarize_packet(const Json& p) {
  auto get = [&](const char* k) -> std::string {
    if (!p.contains(k) || p[k].is_null()) return "?";
    return p[k].is_string() ? p[k].get<std::string>() : p[k].dump();
  };
  char line[256];
  std::string op = p.contains("opcode_name") && p["opcode_name"].is_string()
                       ? p["opcode_name"].get<std::string>()
                       : (p.contains("opcode") ? "opcode " + p["opcode"].dump() : "-");
  std::string qpn = "?";
  if (p.contains("dqpn")) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%06x", p["dqpn"].get<unsigned>());
    qpn = b;
  }
  std::snprintf(line, sizeof line, "%4s  %s:%s > %s:%s  %-33s dqpn %s psn %-8s len %-5s", get("index").c_str(),
                get("src").c_str(), get("sport").c_str(), get("dst").c_str(), get("dport").c_str(),
                op.c_str(), qpn.c_str(), get("psn").c_str(), get("payload_len").c_str());
  std::string s = line;
  if (p.contains("reth")) {
    std::snprintf(line, sizeof line, "  reth va=0x%llx rkey=0x%x len=%u",
                  static_cast<unsigned long long>(p["reth"]["va"].get<uint64_t>()),
                  p["reth"]["rkey"].get<unsigned>(), p["reth"]["len"].get<unsigned>());
    s += line;
  }
  if (p.contains("aeth")) {
    std::snprintf(line, sizeof line, "  aeth syn=0x%02x msn=%u", p["aeth"]["syndrome"].get<unsigned>(),
                  p["aeth"]["msn"].get<unsigned>());
    s += line;
  }
  if (p.contains("imm")) {
    std::snprintf(line, sizeof line, "  imm=0x%08x", p["imm"].get<unsigned>());
    s += line;
  }
  if (p.contains("outer") && p["outer"].contains("vni")) s += "  vxlan vni " + p["outer"]["vni"].dump();
  s += p["ok"].get<bool>() ? "  OK" : "  DROP " + p["drop_reason"].get<std::string>();
  return s;
}

}  // namespace tandem::common
