#include <catch2/catch.hpp>

#include <cstring>

#include "rnic/cm/mad.h"

using namespace tandem::rnic::cm;

TEST_CASE("a REQ encodes at the IBA offsets and decodes to the same fields") {
  CmMsg m;
  m.hdr.attr = Attr::kReq;
  m.hdr.tid = 0x1122334455667788ull;
  m.local_comm_id = 0xA1B2C3D4;
  m.service_id = service_id(kPsTcp, 7174);
  m.ca_guid = 0x0200000000000001ull;
  m.qpn = 0x123456;
  m.responder_resources = 4;
  m.initiator_depth = 3;
  m.remote_cm_timeout = 16;
  m.flow_control = true;
  m.starting_psn = 0xABCDEF;
  m.local_cm_timeout = 18;
  m.retry_count = 7;
  m.pkey = 0x8001;
  m.path_mtu = 3;
  m.rnr_retry_count = 6;
  m.max_cm_retries = 15;
  m.srq = true;
  m.local_gid = gid_of_ipv4(0x0A000001);
  m.remote_gid = gid_of_ipv4(0x0A000002);
  m.flow_label = 0xABCDE;
  m.packet_rate = 3;
  m.hop_limit = 64;
  m.sl = 5;
  m.local_ack_timeout = 14;
  uint8_t hdr[kCmaHdrLen];
  write_cma_hdr(CmaHdr{0x0A000001, 0x0A000002, 40000}, hdr);
  std::memcpy(m.priv.data(), hdr, kCmaHdrLen);
  m.priv_len = kCmaHdrLen;
  uint8_t b[kMadLen];
  encode_mad(m, b);
  // The MAD header and a few fields by hand (IBA table 106 offsets + 24).
  CHECK(b[0] == 1);
  CHECK(b[1] == 0x07);
  CHECK(b[2] == 2);
  CHECK(b[3] == 0x03);
  CHECK(b[16] == 0x00);
  CHECK(b[17] == 0x10);
  CHECK(b[24] == 0xA1);
  CHECK(b[24 + 8 + 4] == 0x01);  // service ID 0x0000000001061C06
  CHECK(b[24 + 8 + 5] == 0x06);
  CHECK(b[24 + 8 + 6] == 0x1C);
  CHECK(b[24 + 32] == 0x12);
  CHECK(b[24 + 35] == 4);
  CHECK(b[24 + 43] == (16 << 3 | 1));
  CHECK(b[24 + 47] == (18 << 3 | 7));
  CHECK(b[24 + 50] == (3 << 4 | 6));
  CHECK(b[24 + 51] == (15 << 4 | 1 << 3));
  CHECK(b[24 + 56 + 10] == 0xFF);
  CHECK(b[24 + 56 + 15] == 0x01);
  CHECK(b[24 + 140 + 1] == 0x40);  // rdma_cm header: IPv4
  CmMsg d;
  REQUIRE(decode_mad(b, kMadLen, d) == MadError::kNone);
  CHECK(d.hdr.tid == m.hdr.tid);
  CHECK(d.local_comm_id == m.local_comm_id);
  CHECK(d.service_id == m.service_id);
  CHECK(d.qpn == m.qpn);
  CHECK(d.starting_psn == m.starting_psn);
  CHECK(d.retry_count == 7);
  CHECK(d.rnr_retry_count == 6);
  CHECK(d.max_cm_retries == 15);
  CHECK(d.srq);
  CHECK(d.flow_label == 0xABCDE);
  CHECK(d.packet_rate == 3);
  CHECK(d.sl == 5);
  CHECK(d.local_ack_timeout == 14);
  CHECK(ipv4_of_gid(d.remote_gid) == 0x0A000002);
  CmaHdr h;
  REQUIRE(read_cma_hdr(d.priv.data(), h));
  CHECK(h.src_ip == 0x0A000001);
  CHECK(h.dst_ip == 0x0A000002);
  CHECK(h.src_port == 40000);
}

TEST_CASE("REP, REJ, MRA, DREQ round trip") {
  for (Attr a : {Attr::kRep, Attr::kRej, Attr::kMra, Attr::kRtu, Attr::kDreq, Attr::kDrep, Attr::kSidrRep}) {
    CmMsg m;
    m.hdr.attr = a;
    m.local_comm_id = 7;
    m.remote_comm_id = 9;
    m.qpn = 0x100;
    m.starting_psn = 0x55;
    m.reason = RejReason::kInvalidServiceId;
    m.msg = MsgKind::kRep;
    m.service_timeout = 24;
    m.rnr_retry_count = 7;
    m.priv[0] = 0xEE;
    m.priv_len = 1;
    uint8_t b[kMadLen];
    encode_mad(m, b);
    CmMsg d;
    REQUIRE(decode_mad(b, kMadLen, d) == MadError::kNone);
    CHECK(d.priv[0] == 0xEE);
    CHECK(d.priv_len == private_capacity(a));
    if (a != Attr::kSidrRep) CHECK(d.remote_comm_id == 9);
    if (a == Attr::kRej) CHECK(d.reason == RejReason::kInvalidServiceId);
    if (a == Attr::kMra) CHECK(d.service_timeout == 24);
    if (a == Attr::kRep) CHECK(d.rnr_retry_count == 7);
    if (a == Attr::kDreq || a == Attr::kRep || a == Attr::kSidrRep) CHECK(d.qpn == 0x100);
  }
}

TEST_CASE("malformed MADs are refused with their reason, never read past 256 bytes") {
  uint8_t b[kMadLen] = {};
  CmMsg m;
  m.hdr.attr = Attr::kRtu;
  encode_mad(m, b);
  CmMsg d;
  CHECK(decode_mad(b, 255, d) == MadError::kTruncated);
  uint8_t x[kMadLen];
  std::memcpy(x, b, kMadLen);
  x[0] = 2;
  CHECK(decode_mad(x, kMadLen, d) == MadError::kBadBaseVersion);
  std::memcpy(x, b, kMadLen);
  x[1] = 0x04;
  CHECK(decode_mad(x, kMadLen, d) == MadError::kNotCm);
  std::memcpy(x, b, kMadLen);
  x[2] = 1;
  CHECK(decode_mad(x, kMadLen, d) == MadError::kBadClassVersion);
  std::memcpy(x, b, kMadLen);
  x[3] = 0x81;
  CHECK(decode_mad(x, kMadLen, d) == MadError::kBadMethod);
  std::memcpy(x, b, kMadLen);
  x[17] = 0x77;
  CHECK(decode_mad(x, kMadLen, d) == MadError::kUnknownAttr);
  x[17] = 0x19;
  CHECK(decode_mad(x, kMadLen, d) == MadError::kUnsupportedAttr);
}
