// The wire side of the core: descriptors serialise into frames that the
// standard parser accepts, and the IRN extension and SACK encodings round-trip.
#include <catch2/catch.hpp>

#include "common/wire/roce_packet.h"
#include "rnic/core/frame.h"
#include "rnic/core/irn_wire.h"

using namespace tandem::rnic;
using tandem::common::DropReason;

TEST_CASE("XETH round-trips and a wrong magic is refused") {
  uint8_t b[kXethLen];
  const Xeth x{0xABCDEF, 123456, 999999, 0x1234, 0x1122334455667788ull};
  write_xeth(b, x);
  Xeth y;
  REQUIRE(read_xeth(b, kXethLen, y));
  CHECK(y.recv_idx == x.recv_idx);
  CHECK(y.msg_offset == x.msg_offset);
  CHECK(y.msg_len == x.msg_len);
  CHECK(y.rkey == x.rkey);
  CHECK(y.va == x.va);
  CHECK(!read_xeth(b, kXethLen - 1, y));
  b[0] ^= 1;
  CHECK(!read_xeth(b, kXethLen, y));
}

TEST_CASE("SACK packs a 24-bit base PSN and a 40-bit bitmap") {
  const uint64_t v = sack_encode(0xFFFFFE, (1ull << 39) | 5);
  CHECK(sack_base(v) == 0xFFFFFE);
  CHECK(sack_bitmap(v) == ((1ull << 39) | 5));
  CHECK(sack_bitmap(sack_encode(1, ~0ull)) == (1ull << 40) - 1);
}

TEST_CASE("descriptors of every kind build frames that parse_roce accepts") {
  uint8_t payload[300];
  for (int i = 0; i < 300; ++i) payload[i] = static_cast<uint8_t>(i);
  const uint8_t ops[] = {IBV_OPCODE_RC_SEND_ONLY, IBV_OPCODE_RC_SEND_LAST_WITH_IMMEDIATE,
                         IBV_OPCODE_RC_RDMA_WRITE_FIRST, IBV_OPCODE_RC_RDMA_WRITE_MIDDLE,
                         IBV_OPCODE_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                         IBV_OPCODE_RC_RDMA_READ_REQUEST, IBV_OPCODE_RC_RDMA_READ_RESPONSE_ONLY,
                         IBV_OPCODE_RC_ACKNOWLEDGE, IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE};
  for (uint8_t op : ops) {
    for (bool xeth : {false, true}) {
      CAPTURE(int(op), xeth);
      const bool carries = tandem::common::opcode_has(op, tandem::common::kOpPayload);
      if (xeth && !carries) continue;
      TxDesc d;
      d.bth.opcode = op;
      d.bth.psn = 0xFFFFFF;
      d.bth.dqpn = 0x123;
      d.bth.ack_req = true;
      d.reth = {0xAABBCCDD00112233ull, 77, 5000};
      d.aeth = {0x1F, 42};
      d.imm = 0xDEADBEEF;
      d.atomic_ack = sack_encode(7, 0b1011);
      d.udp_sport = 0xC123;
      d.has_xeth = xeth;
      d.xeth = Xeth{3, 256, 1000, 77, 0x5000};
      if (carries) {
        d.payload_len = 201;  // odd, so the pad is exercised; two pieces
        d.num_segs = 2;
        d.segs[0] = TxSeg{payload, 100};
        d.segs[1] = TxSeg{payload + 150, 101};
      }
      uint8_t buf[2048];
      FrameAddrs fa;
      fa.src_ip = 0x0A000001;
      fa.dst_ip = 0x0A000002;
      const std::size_t n = build_frame(d, fa, buf, sizeof buf);
      REQUIRE(n > 0);
      tandem::common::RocePacket p;
      REQUIRE(tandem::common::parse_roce(buf, n, p) == DropReason::kNone);
      CHECK(p.bth.opcode == op);
      CHECK(p.bth.psn == 0xFFFFFF);
      CHECK(p.bth.dqpn == 0x123);
      CHECK(p.udp.sport == 0xC123);
      CHECK(p.payload_len == d.wire_payload_len());
      const uint8_t* pl = buf + p.payload_offset;
      if (xeth) {
        Xeth y;
        REQUIRE(read_xeth(pl, p.payload_len, y));
        CHECK(y.msg_offset == 256);
        pl += kXethLen;
      }
      if (carries) {
        CHECK(std::memcmp(pl, payload, 100) == 0);
        CHECK(std::memcmp(pl + 100, payload + 150, 101) == 0);
      }
      if (tandem::common::opcode_has(op, tandem::common::kOpAtomicAck)) {
        CHECK(sack_base(p.atomic_ack) == 7);
        CHECK(sack_bitmap(p.atomic_ack) == 0b1011);
      }
      if (tandem::common::opcode_has(op, tandem::common::kOpImm)) CHECK(p.imm == 0xDEADBEEF);
      // The header-only writer produces the same transport headers.
      uint8_t th[kMaxTransportHdrLen];
      const std::size_t tl = write_transport_headers(d, th);
      const std::size_t bth_off = p.payload_offset - (tl - (xeth ? kXethLen : 0));
      CHECK(std::memcmp(buf + bth_off, th, tl) == 0);
    }
  }
}
