#include "rnic/cm/mad.h"

#include <algorithm>
#include <cstring>

#include "common/wire/byte_order.h"

namespace tandem::rnic::cm {

using common::load_be16;
using common::load_be32;
using common::load_be64;
using common::store_be16;
using common::store_be32;
using common::store_be64;

namespace {

// Byte offsets of a message's fields from the start of the MAD (after the 24-byte header).
constexpr uint32_t B = kMadHdrLen;

uint32_t private_offset(Attr a) noexcept {
  switch (a) {
    case Attr::kReq: return B + 140;
    case Attr::kMra: return B + 10;
    case Attr::kRej: return B + 84;
    case Attr::kRep: return B + 36;
    case Attr::kRtu: return B + 8;
    case Attr::kDreq: return B + 12;
    case Attr::kDrep: return B + 8;
    case Attr::kSidrReq: return B + 16;
    case Attr::kSidrRep: return B + 96;
    default: return kMadLen;
  }
}

uint32_t be24(const uint8_t* p) noexcept { return load_be32(p) >> 8; }
void put24(uint8_t* p, uint32_t v) noexcept {  // the top 24 bits of a word; its low byte is left alone
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
}

}  // namespace

std::string_view attr_name(Attr a) noexcept {
  switch (a) {
    case Attr::kReq: return "REQ";
    case Attr::kMra: return "MRA";
    case Attr::kRej: return "REJ";
    case Attr::kRep: return "REP";
    case Attr::kRtu: return "RTU";
    case Attr::kDreq: return "DREQ";
    case Attr::kDrep: return "DREP";
    case Attr::kSidrReq: return "SIDR_REQ";
    case Attr::kSidrRep: return "SIDR_REP";
    case Attr::kLap: return "LAP";
    case Attr::kApr: return "APR";
  }
  return "?";
}

std::string_view mad_error_name(MadError e) noexcept {
  switch (e) {
    case MadError::kNone: return "none";
    case MadError::kTruncated: return "truncated";
    case MadError::kBadBaseVersion: return "bad_base_version";
    case MadError::kNotCm: return "not_cm_class";
    case MadError::kBadClassVersion: return "bad_class_version";
    case MadError::kBadMethod: return "bad_method";
    case MadError::kUnknownAttr: return "unknown_attr";
    case MadError::kUnsupportedAttr: return "unsupported_attr";
  }
  return "?";
}

uint32_t private_capacity(Attr a) noexcept { return kMadLen - private_offset(a); }

Gid gid_of_ipv4(uint32_t ip) noexcept {
  Gid g{};
  g[10] = g[11] = 0xFF;
  store_be32(g.data() + 12, ip);
  return g;
}

uint32_t ipv4_of_gid(const Gid& g) noexcept {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  if (std::memcmp(g.data(), kPrefix, 12) != 0) return 0;
  return load_be32(g.data() + 12);
}

MadError decode_mad(const uint8_t* p, uint32_t len, CmMsg& m) noexcept {
  if (len < kMadLen) return MadError::kTruncated;
  m = CmMsg{};
  m.hdr.base_version = p[0];
  m.hdr.mgmt_class = p[1];
  m.hdr.class_version = p[2];
  m.hdr.method = p[3];
  m.hdr.status = load_be16(p + 4);
  m.hdr.class_specific = load_be16(p + 6);
  m.hdr.tid = load_be64(p + 8);
  m.hdr.attr = static_cast<Attr>(load_be16(p + 16));
  m.hdr.attr_mod = load_be32(p + 20);
  if (m.hdr.base_version != 1) return MadError::kBadBaseVersion;
  if (m.hdr.mgmt_class != kMgmtClassCm) return MadError::kNotCm;
  if (m.hdr.class_version != kCmClassVersion) return MadError::kBadClassVersion;
  if (m.hdr.method != kMethodSend) return MadError::kBadMethod;
  const uint8_t* b = p + B;
  switch (m.hdr.attr) {
    case Attr::kReq:
      m.local_comm_id = load_be32(b + 0);
      m.service_id = load_be64(b + 8);
      m.ca_guid = load_be64(b + 16);
      m.qkey = load_be32(b + 28);
      m.qpn = be24(b + 32);
      m.responder_resources = b[35];
      m.initiator_depth = b[39];
      m.remote_cm_timeout = b[43] >> 3;
      m.transport = (b[43] >> 1) & 3;
      m.flow_control = b[43] & 1;
      m.starting_psn = be24(b + 44);
      m.local_cm_timeout = b[47] >> 3;
      m.retry_count = b[47] & 7;
      m.pkey = load_be16(b + 48);
      m.path_mtu = b[50] >> 4;
      m.rnr_retry_count = b[50] & 7;
      m.max_cm_retries = b[51] >> 4;
      m.srq = (b[51] >> 3) & 1;
      m.local_lid = load_be16(b + 52);
      m.remote_lid = load_be16(b + 54);
      std::memcpy(m.local_gid.data(), b + 56, 16);
      std::memcpy(m.remote_gid.data(), b + 72, 16);
      m.flow_label = load_be32(b + 88) >> 12;
      m.packet_rate = b[91] & 0x3F;
      m.traffic_class = b[92];
      m.hop_limit = b[93];
      m.sl = b[94] >> 4;
      m.subnet_local = (b[94] >> 3) & 1;
      m.local_ack_timeout = b[95] >> 3;
      break;
    case Attr::kMra:
      m.local_comm_id = load_be32(b);
      m.remote_comm_id = load_be32(b + 4);
      m.msg = static_cast<MsgKind>(b[8] >> 6);
      m.service_timeout = b[9] >> 3;
      break;
    case Attr::kRej:
      m.local_comm_id = load_be32(b);
      m.remote_comm_id = load_be32(b + 4);
      m.msg = static_cast<MsgKind>(b[8] >> 6);
      m.ari_len = b[9] >> 1;
      m.reason = static_cast<RejReason>(load_be16(b + 10));
      break;
    case Attr::kRep:
      m.local_comm_id = load_be32(b);
      m.remote_comm_id = load_be32(b + 4);
      m.qkey = load_be32(b + 8);
      m.qpn = be24(b + 12);
      m.starting_psn = be24(b + 20);
      m.responder_resources = b[24];
      m.initiator_depth = b[25];
      m.target_ack_delay = b[26] >> 3;
      m.failover = (b[26] >> 1) & 3;
      m.flow_control = b[26] & 1;
      m.rnr_retry_count = b[27] >> 5;
      m.srq = (b[27] >> 4) & 1;
      m.ca_guid = load_be64(b + 28);
      break;
    case Attr::kRtu:
    case Attr::kDrep:
      m.local_comm_id = load_be32(b);
      m.remote_comm_id = load_be32(b + 4);
      break;
    case Attr::kDreq:
      m.local_comm_id = load_be32(b);
      m.remote_comm_id = load_be32(b + 4);
      m.qpn = be24(b + 8);
      break;
    case Attr::kSidrReq:
      m.local_comm_id = load_be32(b);  // request ID
      m.pkey = load_be16(b + 4);
      m.service_id = load_be64(b + 8);
      break;
    case Attr::kSidrRep:
      m.local_comm_id = load_be32(b);  // request ID
      m.sidr_status = b[4];
      m.qpn = be24(b + 8);
      m.service_id = load_be64(b + 12);
      m.qkey = load_be32(b + 20);
      break;
    case Attr::kLap:
    case Attr::kApr:
      return MadError::kUnsupportedAttr;
    default:
      return MadError::kUnknownAttr;
  }
  const uint32_t at = private_offset(m.hdr.attr);
  m.priv_len = kMadLen - at;
  std::memcpy(m.priv.data(), p + at, m.priv_len);
  return MadError::kNone;
}

void encode_mad(const CmMsg& m, uint8_t* out) noexcept {
  std::memset(out, 0, kMadLen);
  out[0] = m.hdr.base_version;
  out[1] = m.hdr.mgmt_class;
  out[2] = m.hdr.class_version;
  out[3] = m.hdr.method;
  store_be16(out + 4, m.hdr.status);
  store_be16(out + 6, m.hdr.class_specific);
  store_be64(out + 8, m.hdr.tid);
  store_be16(out + 16, static_cast<uint16_t>(m.hdr.attr));
  store_be32(out + 20, m.hdr.attr_mod);
  uint8_t* b = out + B;
  switch (m.hdr.attr) {
    case Attr::kReq:
      store_be32(b, m.local_comm_id);
      store_be64(b + 8, m.service_id);
      store_be64(b + 16, m.ca_guid);
      store_be32(b + 28, m.qkey);
      put24(b + 32, m.qpn);
      b[35] = m.responder_resources;
      b[39] = m.initiator_depth;
      b[43] = static_cast<uint8_t>((m.remote_cm_timeout & 0x1F) << 3 | (m.transport & 3) << 1 | (m.flow_control ? 1 : 0));
      put24(b + 44, m.starting_psn);
      b[47] = static_cast<uint8_t>((m.local_cm_timeout & 0x1F) << 3 | (m.retry_count & 7));
      store_be16(b + 48, m.pkey);
      b[50] = static_cast<uint8_t>((m.path_mtu & 0xF) << 4 | (m.rnr_retry_count & 7));
      b[51] = static_cast<uint8_t>((m.max_cm_retries & 0xF) << 4 | (m.srq ? 1 : 0) << 3);
      store_be16(b + 52, m.local_lid);
      store_be16(b + 54, m.remote_lid);
      std::memcpy(b + 56, m.local_gid.data(), 16);
      std::memcpy(b + 72, m.remote_gid.data(), 16);
      store_be32(b + 88, (m.flow_label & 0xFFFFF) << 12 | (m.packet_rate & 0x3F));
      b[92] = m.traffic_class;
      b[93] = m.hop_limit;
      b[94] = static_cast<uint8_t>((m.sl & 0xF) << 4 | (m.subnet_local ? 1 : 0) << 3);
      b[95] = static_cast<uint8_t>((m.local_ack_timeout & 0x1F) << 3);
      break;
    case Attr::kMra:
      store_be32(b, m.local_comm_id);
      store_be32(b + 4, m.remote_comm_id);
      b[8] = static_cast<uint8_t>(static_cast<uint8_t>(m.msg) << 6);
      b[9] = static_cast<uint8_t>((m.service_timeout & 0x1F) << 3);
      break;
    case Attr::kRej:
      store_be32(b, m.local_comm_id);
      store_be32(b + 4, m.remote_comm_id);
      b[8] = static_cast<uint8_t>(static_cast<uint8_t>(m.msg) << 6);
      b[9] = static_cast<uint8_t>((m.ari_len & 0x7F) << 1);
      store_be16(b + 10, static_cast<uint16_t>(m.reason));
      break;
    case Attr::kRep:
      store_be32(b, m.local_comm_id);
      store_be32(b + 4, m.remote_comm_id);
      store_be32(b + 8, m.qkey);
      put24(b + 12, m.qpn);
      put24(b + 20, m.starting_psn);
      b[24] = m.responder_resources;
      b[25] = m.initiator_depth;
      b[26] = static_cast<uint8_t>((m.target_ack_delay & 0x1F) << 3 | (m.failover & 3) << 1 | (m.flow_control ? 1 : 0));
      b[27] = static_cast<uint8_t>((m.rnr_retry_count & 7) << 5 | (m.srq ? 1 : 0) << 4);
      store_be64(b + 28, m.ca_guid);
      break;
    case Attr::kRtu:
    case Attr::kDrep:
      store_be32(b, m.local_comm_id);
      store_be32(b + 4, m.remote_comm_id);
      break;
    case Attr::kDreq:
      store_be32(b, m.local_comm_id);
      store_be32(b + 4, m.remote_comm_id);
      put24(b + 8, m.qpn);
      break;
    case Attr::kSidrReq:
      store_be32(b, m.local_comm_id);
      store_be16(b + 4, m.pkey);
      store_be64(b + 8, m.service_id);
      break;
    case Attr::kSidrRep:
      store_be32(b, m.local_comm_id);
      b[4] = m.sidr_status;
      put24(b + 8, m.qpn);
      store_be64(b + 12, m.service_id);
      store_be32(b + 20, m.qkey);
      break;
    default:
      return;
  }
  const uint32_t at = private_offset(m.hdr.attr);
  std::memcpy(out + at, m.priv.data(), std::min<uint32_t>(m.priv_len, kMadLen - at));
}

void write_cma_hdr(const CmaHdr& h, uint8_t* out) noexcept {
  std::memset(out, 0, kCmaHdrLen);
  out[0] = 0;         // cma_version
  out[1] = 4 << 4;    // ip_version (upper nibble)
  store_be16(out + 2, h.src_port);
  store_be32(out + 4 + 12, h.src_ip);   // src_addr.ip4.addr (after pad[3])
  store_be32(out + 20 + 12, h.dst_ip);  // dst_addr.ip4.addr
}

bool read_cma_hdr(const uint8_t* p, CmaHdr& out) noexcept {
  if (p[0] != 0 || (p[1] >> 4) != 4) return false;
  out.src_port = load_be16(p + 2);
  out.src_ip = load_be32(p + 16);
  out.dst_ip = load_be32(p + 32);
  return true;
}

}  // namespace tandem::rnic::cm
