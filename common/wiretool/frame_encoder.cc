#include "common/wiretool/frame_encoder.h"

#include <arpa/inet.h>

#include <cctype>
#include <charconv>
#include <cstdio>
#include <set>
#include <string>
#include <string_view>

#include "common/wire/entropy.h"
#include "common/wire/icrc.h"
#include "common/wire/roce_packet.h"

namespace tandem::common {

namespace {

const std::set<std::string_view> kPacketKeys = {
    "opcode", "src", "dst", "sport", "dport", "dqpn", "psn", "ack_req", "resv7", "se", "mig", "pkey",
    "fecn", "becn", "reth", "aeth", "imm", "atomic", "atomic_ack", "payload_hex", "payload_len",
    "src_mac", "dst_mac", "vlan", "vlan_pcp", "tos", "ttl", "ip_id", "bad_icrc", "icrc",
    "truncate", "outer",
    // Printed by decode and accepted back, so decoded packets re-encode.
    "index", "ok", "drop_reason", "len", "opcode_name", "icrc_ok"};
const std::set<std::string_view> kOuterKeys = {"src", "dst", "sport", "dport", "src_mac",
                                               "dst_mac", "vlan", "vlan_pcp", "tos", "ttl",
                                               "ip_id", "vni"};

[[noreturn]] void fail(std::string_view field, const std::string& what) {
  throw SpecError("field '" + std::string(field) + "': " + what);
}

uint64_t parse_uint_text(std::string_view field, const std::string& s, uint64_t max) {
  std::string_view t = s;
  int base = 10;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) {
    t.remove_prefix(2);
    base = 16;
  }
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v, base);
  if (t.empty() || ec != std::errc() || p != t.data() + t.size() || v > max) {
    fail(field, "expected an integer 0.." + std::to_string(max) + ", got \"" + s + "\"");
  }
  return v;
}

// Accepts a JSON number or a decimal/0x-hex string.
uint64_t get_uint(const Json& j, std::string_view field, uint64_t max) {
  if (j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0)) {
    const uint64_t v = j.get<uint64_t>();
    if (v <= max) return v;
  } else if (j.is_string()) {
    return parse_uint_text(field, j.get<std::string>(), max);
  }
  fail(field, "expected an integer 0.." + std::to_string(max) + ", got " + j.dump());
}

bool get_bool(const Json& j, std::string_view field) {
  if (!j.is_boolean()) fail(field, "expected true or false, got " + j.dump());
  return j.get<bool>();
}

uint32_t get_ipv4(const Json& j, std::string_view field) {
  in_addr a{};
  if (!j.is_string() || inet_pton(AF_INET, j.get<std::string>().c_str(), &a) != 1) {
    fail(field, "expected a dotted IPv4 address, got " + j.dump());
  }
  return ntohl(a.s_addr);
}

MacAddr get_mac(const Json& j, std::string_view field) {
  MacAddr m{};
  unsigned b[6];
  char extra;
  if (!j.is_string() || std::sscanf(j.get<std::string>().c_str(), "%x:%x:%x:%x:%x:%x%c", &b[0],
                                    &b[1], &b[2], &b[3], &b[4], &b[5], &extra) != 6) {
    fail(field, "expected a MAC address like 02:00:00:00:00:01, got " + j.dump());
  }
  for (int i = 0; i < 6; ++i) {
    if (b[i] > 0xFF) fail(field, "expected a MAC address like 02:00:00:00:00:01, got " + j.dump());
    m[i] = static_cast<uint8_t>(b[i]);
  }
  return m;
}

const Json& get_object(const Json& j, std::string_view field) {
  if (!j.is_object()) fail(field, "expected an object, got " + j.dump());
  return j;
}

std::vector<uint8_t> get_hex(const Json& j, std::string_view field) {
  if (!j.is_string()) fail(field, "expected a hex string, got " + j.dump());
  std::vector<uint8_t> out;
  int hi = -1;
  for (char c : j.get<std::string>()) {
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else if (c == ' ' || c == ':') continue;
    else fail(field, std::string("not a hex digit: '") + c + "'");
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  if (hi >= 0) fail(field, "odd number of hex digits");
  return out;
}

uint8_t get_opcode(const Json& spec) {
  if (spec.contains("opcode")) {
    const Json& o = spec["opcode"];
    if (o.is_string()) {
      const std::string name = o.get<std::string>();
      if (name.empty() || !(std::isdigit(static_cast<unsigned char>(name[0])))) {
        const int op = opcode_from_name(name);
        if (op < 0) fail("opcode", "unknown opcode name \"" + name + "\" (e.g. RC_SEND_ONLY)");
        return static_cast<uint8_t>(op);
      }
    }
    return static_cast<uint8_t>(get_uint(o, "opcode", 255));
  }
  if (spec.contains("opcode_name") && spec["opcode_name"].is_string()) {
    const int op = opcode_from_name(spec["opcode_name"].get<std::string>());
    if (op < 0) fail("opcode_name", "unknown opcode name " + spec["opcode_name"].dump());
    return static_cast<uint8_t>(op);
  }
  throw SpecError("field 'opcode' is required (a number or a name like RC_SEND_ONLY)");
}

void check_keys(const Json& obj, const std::set<std::string_view>& allowed, std::string_view where) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!allowed.count(it.key())) {
      throw SpecError("unknown field '" + std::string(where) + it.key() + "'");
    }
  }
}

// Ethernet and IPv4 fields shared by the packet and its VXLAN outer headers.
void read_l2_l3(const Json& j, EthHeader& eth, Ipv4Header& ip, std::string_view prefix) {
  auto name = [&](const char* k) { return std::string(prefix) + k; };
  if (j.contains("src_mac")) eth.src = get_mac(j["src_mac"], name("src_mac"));
  if (j.contains("dst_mac")) eth.dst = get_mac(j["dst_mac"], name("dst_mac"));
  if (j.contains("vlan") || j.contains("vlan_pcp")) {
    eth.has_vlan = true;
    const uint64_t vid = j.contains("vlan") ? get_uint(j["vlan"], name("vlan"), 4095) : 0;
    const uint64_t pcp = j.contains("vlan_pcp") ? get_uint(j["vlan_pcp"], name("vlan_pcp"), 7) : 0;
    eth.vlan_tci = static_cast<uint16_t>(pcp << 13 | vid);
  }
  if (j.contains("src")) ip.src = get_ipv4(j["src"], name("src"));
  if (j.contains("dst")) ip.dst = get_ipv4(j["dst"], name("dst"));
  if (j.contains("tos")) ip.tos = static_cast<uint8_t>(get_uint(j["tos"], name("tos"), 255));
  if (j.contains("ttl")) ip.ttl = static_cast<uint8_t>(get_uint(j["ttl"], name("ttl"), 255));
  if (j.contains("ip_id")) ip.id = static_cast<uint16_t>(get_uint(j["ip_id"], name("ip_id"), 0xFFFF));
}

}  // namespace

std::vector<uint8_t> encode_frame(const Json& spec) {
  if (!spec.is_object()) throw SpecError("expected a JSON object per line, got " + spec.dump());
  check_keys(spec, kPacketKeys, "");

  RocePacket pkt;
  pkt.eth.src = {0x02, 0, 0, 0, 0, 0x01};
  pkt.eth.dst = {0x02, 0, 0, 0, 0, 0x02};
  pkt.ip.src = 0x0A000001;  // 10.0.0.1
  pkt.ip.dst = 0x0A000002;
  pkt.udp.sport = kEntropyPortBase;
  read_l2_l3(spec, pkt.eth, pkt.ip, "");
  if (spec.contains("sport")) pkt.udp.sport = static_cast<uint16_t>(get_uint(spec["sport"], "sport", 0xFFFF));
  if (spec.contains("dport") && get_uint(spec["dport"], "dport", 0xFFFF) != kRoceUdpPort) {
    fail("dport", "a RoCEv2 packet goes to UDP port 4791, got " + spec["dport"].dump());
  }

  const uint8_t op = get_opcode(spec);
  if (spec.contains("opcode") && spec.contains("opcode_name") && spec["opcode_name"].is_string() &&
      opcode_from_name(spec["opcode_name"].get<std::string>()) != op) {
    fail("opcode_name", spec["opcode_name"].dump() + " does not match opcode " + spec["opcode"].dump());
  }
  const std::string op_name = opcode_known(op) ? std::string(opcode_info(op).name)
                                               : "opcode " + std::to_string(op);
  Bth& bth = pkt.bth;
  bth.opcode = op;
  if (spec.contains("dqpn")) bth.dqpn = static_cast<uint32_t>(get_uint(spec["dqpn"], "dqpn", 0xFFFFFF));
  if (spec.contains("psn")) bth.psn = static_cast<uint32_t>(get_uint(spec["psn"], "psn", 0xFFFFFF));
  if (spec.contains("pkey")) bth.pkey = static_cast<uint16_t>(get_uint(spec["pkey"], "pkey", 0xFFFF));
  if (spec.contains("ack_req")) bth.ack_req = get_bool(spec["ack_req"], "ack_req");
  if (spec.contains("resv7")) bth.resv7 = static_cast<uint8_t>(get_uint(spec["resv7"], "resv7", 0x7F));
  if (spec.contains("se")) bth.se = get_bool(spec["se"], "se");
  if (spec.contains("mig")) bth.mig = get_bool(spec["mig"], "mig");
  if (spec.contains("fecn")) bth.fecn = get_bool(spec["fecn"], "fecn");
  if (spec.contains("becn")) bth.becn = get_bool(spec["becn"], "becn");

  // Extension headers: only those the opcode carries may be given.
  auto carried = [&](const char* field, uint32_t flag, const char* hdr) {
    if (!spec.contains(field)) return false;
    if (!opcode_has(op, flag)) fail(field, op_name + " carries no " + hdr);
    return true;
  };
  std::vector<uint8_t> payload;
  if (spec.contains("payload_hex")) payload = get_hex(spec["payload_hex"], "payload_hex");
  if (spec.contains("payload_len")) {
    const uint64_t n = get_uint(spec["payload_len"], "payload_len", 65535);
    if (spec.contains("payload_hex") && n != payload.size()) {
      fail("payload_len", std::to_string(n) + " but payload_hex has " +
                              std::to_string(payload.size()) + " bytes");
    }
    if (!spec.contains("payload_hex")) {
      payload.resize(n);
      for (std::size_t i = 0; i < n; ++i) payload[i] = spec_payload_byte(i);
    }
  }
  if (!payload.empty() && opcode_known(op) && !opcode_has(op, kOpPayload)) {
    fail(spec.contains("payload_hex") ? "payload_hex" : "payload_len", op_name + " carries no payload");
  }

  if (carried("reth", kOpReth, "RETH")) {
    const Json& r = get_object(spec["reth"], "reth");
    check_keys(r, {"va", "rkey", "len"}, "reth.");
    if (r.contains("va")) pkt.reth.va = get_uint(r["va"], "reth.va", UINT64_MAX);
    if (r.contains("rkey")) pkt.reth.rkey = static_cast<uint32_t>(get_uint(r["rkey"], "reth.rkey", UINT32_MAX));
    pkt.reth.len = static_cast<uint32_t>(
        r.contains("len") ? get_uint(r["len"], "reth.len", UINT32_MAX) : payload.size());
  } else if (opcode_has(op, kOpReth)) {
    pkt.reth.len = static_cast<uint32_t>(payload.size());
  }
  if (carried("aeth", kOpAeth, "AETH")) {
    const Json& a = get_object(spec["aeth"], "aeth");
    check_keys(a, {"syndrome", "msn"}, "aeth.");
    if (a.contains("syndrome")) pkt.aeth.syndrome = static_cast<uint8_t>(get_uint(a["syndrome"], "aeth.syndrome", 255));
    if (a.contains("msn")) pkt.aeth.msn = static_cast<uint32_t>(get_uint(a["msn"], "aeth.msn", 0xFFFFFF));
  }
  if (carried("imm", kOpImm, "ImmDt")) pkt.imm = static_cast<uint32_t>(get_uint(spec["imm"], "imm", UINT32_MAX));
  if (carried("atomic", kOpAtomicEth, "AtomicETH")) {
    const Json& a = get_object(spec["atomic"], "atomic");
    check_keys(a, {"va", "rkey", "swap_add", "compare"}, "atomic.");
    if (a.contains("va")) pkt.atomic.va = get_uint(a["va"], "atomic.va", UINT64_MAX);
    if (a.contains("rkey")) pkt.atomic.rkey = static_cast<uint32_t>(get_uint(a["rkey"], "atomic.rkey", UINT32_MAX));
    if (a.contains("swap_add")) pkt.atomic.swap_add = get_uint(a["swap_add"], "atomic.swap_add", UINT64_MAX);
    if (a.contains("compare")) pkt.atomic.compare = get_uint(a["compare"], "atomic.compare", UINT64_MAX);
  }
  if (carried("atomic_ack", kOpAtomicAck, "AtomicAckETH")) {
    pkt.atomic_ack = get_uint(spec["atomic_ack"], "atomic_ack", UINT64_MAX);
  }

  if (spec.contains("outer")) {
    const Json& o = get_object(spec["outer"], "outer");
    check_keys(o, kOuterKeys, "outer.");
    pkt.has_outer = true;
    pkt.outer.eth.src = {0x02, 0, 0, 0, 0x01, 0x01};
    pkt.outer.eth.dst = {0x02, 0, 0, 0, 0x01, 0x02};
    pkt.outer.ip.src = 0xC0A80001;  // 192.168.0.1
    pkt.outer.ip.dst = 0xC0A80002;
    pkt.outer.udp.sport = kEntropyPortBase;
    read_l2_l3(o, pkt.outer.eth, pkt.outer.ip, "outer.");
    if (o.contains("sport")) pkt.outer.udp.sport = static_cast<uint16_t>(get_uint(o["sport"], "outer.sport", 0xFFFF));
    if (o.contains("dport") && get_uint(o["dport"], "outer.dport", 0xFFFF) != kVxlanUdpPort) {
      fail("outer.dport", "VXLAN goes to UDP port 4789, got " + o["dport"].dump());
    }
    if (o.contains("vni")) pkt.outer.vxlan.vni = static_cast<uint32_t>(get_uint(o["vni"], "outer.vni", 0xFFFFFF));
  }

  std::vector<uint8_t> frame(roce_header_len(pkt) + payload.size() + 3 + kIcrcLen);
  const std::size_t n = build_roce(pkt, payload, frame.data(), frame.size());
  if (n == 0) fail("payload_len", "packet too large for one IPv4 datagram");
  frame.resize(n);

  const bool bad = spec.contains("bad_icrc") && get_bool(spec["bad_icrc"], "bad_icrc");
  if (spec.contains("icrc")) {
    if (bad) fail("icrc", "give either icrc or bad_icrc, not both");
    store_le32(frame.data() + n - kIcrcLen, static_cast<uint32_t>(get_uint(spec["icrc"], "icrc", UINT32_MAX)));
  } else if (bad) {
    // Flip every bit: a value no correct packet with these bytes carries.
    store_le32(frame.data() + n - kIcrcLen, ~load_le32(frame.data() + n - kIcrcLen));
  }
  if (spec.contains("truncate")) {
    const uint64_t cut = get_uint(spec["truncate"], "truncate", UINT32_MAX);
    if (cut >= n) fail("truncate", std::to_string(cut) + " is not shorter than the frame (" + std::to_string(n) + " bytes)");
    frame.resize(cut);
  }
  return frame;
}

}  // namespace tandem::common
