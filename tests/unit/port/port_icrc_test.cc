// A frame corrupted on the wire between two ports (rnic/port on the fake I/O,
// real host interfaces): the receiving port may place its payload before the
// ICRC says it is bad (rnic/core/README.md "ICRC"), but nothing of it reaches
// the application: no ACK or SACK covers it, nothing completes, and the
// retransmission overwrites its bytes; the WRITE_WITH_IMM (or READ) completes
// once, with the data as sent. For go-back-N and IRN QPs.
#include <catch2/catch.hpp>

#include <infiniband/verbs.h>

#include <cstring>
#include <vector>

#include "common/wire/byte_order.h"
#include "common/wire/opcode.h"
#include "common/wire/psn.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/irn_wire.h"
#include "rnic/host/verbs.h"
#include "tests/unit/port/port_harness.h"

using namespace tandem::rnic;
using namespace tandem::rnic::port;
using namespace tandem::rnic::port::test;
using tandem::common::DropReason;
namespace common = tandem::common;

namespace {

constexpr std::size_t kBuf = 16 * 1024;
constexpr uint32_t kPsn = 100;
constexpr uint32_t kLen = 3 * 1024;  // three frames at MTU 1024
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// A tenant with one RC QP.
struct RcApp {
  explicit RcApp(const std::string& socket) {
    ctx = host::open_device(socket.c_str(), host::DeviceAttr{});
    REQUIRE(ctx != nullptr);
    pd = host::alloc_pd(ctx);
    buf = static_cast<uint8_t*>(host::alloc_buf(ctx, kBuf));
    REQUIRE(buf != nullptr);
    mr = host::reg_mr(pd, buf, kBuf, kAccess);
    REQUIRE(mr != nullptr);
    cq = host::create_cq(ctx, 64);
    REQUIRE(cq != nullptr);
    host::QpInitAttr init;
    init.send_cq = init.recv_cq = cq;
    init.cap.max_send_wr = init.cap.max_recv_wr = 16;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    qp = host::create_qp(pd, &init);
    REQUIRE(qp != nullptr);
  }
  ~RcApp() {
    host::destroy_qp(qp);
    host::destroy_cq(cq);
    host::dereg_mr(mr);
    host::free_buf(ctx, buf);
    host::dealloc_pd(pd);
    host::close_device(ctx);
  }
  // INIT -> RTR (toward `remote_overlay`'s QP `remote_qpn`) -> RTS.
  void connect(uint32_t remote_qpn, uint32_t remote_overlay) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = kAccess;
    REQUIRE(host::modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = kPsn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    uint8_t* g = a.ah_attr.grh.dgid.raw;
    g[10] = g[11] = 0xFF;
    common::store_be32(g + 12, remote_overlay);
    REQUIRE(host::modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = kPsn;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    REQUIRE(host::modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
  }
  std::vector<ibv_wc> poll_now() {
    std::vector<ibv_wc> got;
    ibv_wc wc[8];
    int r;
    while ((r = host::poll_cq(cq, 8, wc)) > 0) got.insert(got.end(), wc, wc + r);
    return got;
  }
  // Up to n completions within ~10 s of real time.
  std::vector<ibv_wc> poll(std::size_t n) {
    std::vector<ibv_wc> got;
    for (int i = 0; i < 100000 && got.size() < n; ++i) {
      const std::vector<ibv_wc> more = poll_now();
      got.insert(got.end(), more.begin(), more.end());
      if (more.empty()) usleep(100);
    }
    return got;
  }
  host::Context* ctx = nullptr;
  host::Pd* pd = nullptr;
  uint8_t* buf = nullptr;
  host::Mr* mr = nullptr;
  host::Cq* cq = nullptr;
  host::Qp* qp = nullptr;
};

// Whether a response frame from B says `psn` arrived: a cumulative ACK at or
// past it, or a SACK chunk with its bit set.
bool covers(const FakeFrame& f, uint32_t psn) {
  static constexpr common::ParseOptions kHeaders{.check_icrc = false, .check_ip_checksum = false};
  common::RocePacket p;
  if (common::parse_roce(f.bytes.data(), f.len, p, kHeaders) != DropReason::kNone) return false;
  const uint8_t op = p.bth.opcode;
  if (op == IBV_OPCODE_RC_ACKNOWLEDGE)
    return common::aeth_kind(p.aeth.syndrome) == common::kAethAck && common::psn_le(psn, p.bth.psn);
  if (op != IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE) return false;
  if (common::psn_le(psn, p.bth.psn)) return true;
  const int32_t bit = common::psn_diff(psn, sack_base(p.atomic_ack));
  return (p.bth.resv7 & kSackMark) && bit >= 0 && bit < static_cast<int32_t>(kSackBits) &&
         ((sack_bitmap(p.atomic_ack) >> bit) & 1);
}

// The middle frame (PSN kPsn + 1) of a 3-frame message, as it passes one
// direction of the wire: its first copy gets a payload byte flipped; from its
// second copy (the retransmission) on, frames that way are kept back in order
// and the wires stopped, until the test has looked (release()).
struct CorruptMiddle {
  uint32_t opmask;  // the message's opcodes (kOpWrite, kOpReadResp)
  int copies = 0;
  bool holding = false;
  std::vector<FakeFrame> held;
  uint32_t flipped_at = 0;  // offset in the message of the flipped byte

  bool pass(FakeFrame& f, Pair& p) {
    if (holding) {
      held.push_back(f);
      return false;
    }
    static constexpr common::ParseOptions kHeaders{.check_icrc = false, .check_ip_checksum = false};
    common::RocePacket pkt;
    if (common::parse_roce(f.bytes.data(), f.len, pkt, kHeaders) != DropReason::kNone) return true;
    if (pkt.bth.psn != common::psn_add(kPsn, 1) || !common::opcode_has(pkt.bth.opcode, opmask)) return true;
    if (++copies == 1) {
      // The last 200 bytes of the frame's data (after an IRN WRITE's XETH).
      f.bytes[pkt.payload_offset + pkt.payload_len - 200] ^= 0x5A;
      flipped_at = 1024 + 1024 - 200;
      return true;
    }
    holding = true;
    held.push_back(f);
    p.deliver = false;
    return false;
  }
  // Under p.with(): the kept frames to `to`, the wires on.
  void release(Pair& p, FakeIo& to) {
    for (const FakeFrame& f : held) REQUIRE(to.inject(f.bytes.data(), f.len));
    held.clear();
    holding = false;
    p.deliver = true;
  }
};

// A 3 KiB WRITE_WITH_IMM from A to B (`read` false) or READ by A of B's
// memory, its middle frame corrupted once on the wire.
void run(Reliability mode, bool read) {
  Pair p(PairOptions{.dpu_a = false, .mode = mode});
  RcApp a(p.a.socket), b(p.b.socket);
  a.connect(b.qp->qp_num, Pair::kOverlayB);
  b.connect(a.qp->qp_num, Pair::kOverlayA);
  REQUIRE(p.wait_for([&] {
    const QpCtx* qa = p.a.pw->qp_by_host(a.qp->qp_num);
    const QpCtx* qb = p.b.pw->qp_by_host(b.qp->qp_num);
    return qa && qb && qa->state == IBV_QPS_RTS && qb->state == IBV_QPS_RTS;
  }));
  RcApp& src = read ? b : a;
  RcApp& dst = read ? a : b;
  std::memset(dst.buf, 0, kBuf);
  for (uint32_t i = 0; i < kLen; ++i) src.buf[i] = static_cast<uint8_t>(i * 7 + 3);
  const uint32_t mid = common::psn_add(kPsn, 1);
  Node& receiver = read ? p.a : p.b;

  CorruptMiddle cut{read ? common::kOpReadResp : common::kOpWrite};
  bool acked_mid = false;  // a WRITE: B said the middle frame arrived
  p.with([&] {
    if (read) {
      p.b_to_a = [&](FakeFrame& f) { return cut.pass(f, p); };
    } else {
      p.a_to_b = [&](FakeFrame& f) { return cut.pass(f, p); };
      p.b_to_a = [&](FakeFrame& f) {
        acked_mid |= covers(f, mid);
        return true;
      };
    }
  });
  ibv_sge s{reinterpret_cast<uintptr_t>(a.buf), kLen, a.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htobe32(0xC0FFEE);
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(b.buf);
  wr.wr.rdma.rkey = b.mr->rkey;
  if (!read) {
    ibv_sge rs{reinterpret_cast<uintptr_t>(b.buf) + 8192, 64, b.mr->lkey};
    ibv_recv_wr rwr{};
    rwr.wr_id = 2;
    rwr.sg_list = &rs;
    rwr.num_sge = 1;
    ibv_recv_wr* bad_r = nullptr;
    REQUIRE(host::post_recv(b.qp, &rwr, &bad_r) == 0);
  }
  ibv_send_wr* bad_s = nullptr;
  REQUIRE(host::post_send(a.qp, &wr, &bad_s) == 0);

  // The retransmission is on its way: the receiver has seen the bad frame and dropped it.
  REQUIRE(p.wait_for([&] { return cut.holding; }));
  p.with([&] {
    CHECK(receiver.k().dropped(Stage::kParse, DropReason::kBadIcrc) == 1);
    // Its bytes were placed ahead of the verdict, where the good frame goes
    // (the core checks a 1 KiB frame's ICRC while placing it) ...
    CHECK(dst.buf[cut.flipped_at] == static_cast<uint8_t>(src.buf[cut.flipped_at] ^ 0x5A));
    // ... but no ACK or SACK says the frame arrived.
    CHECK_FALSE(acked_mid);
  });
  CHECK(a.poll_now().empty());  // and nothing completed
  CHECK(b.poll_now().empty());
  p.with([&] { cut.release(p, read ? p.a.io : p.b.io); });
  const std::vector<ibv_wc> wa = a.poll(1);
  REQUIRE(wa.size() == 1);
  CHECK(wa[0].status == IBV_WC_SUCCESS);
  CHECK(wa[0].wr_id == 1);
  if (!read) {
    const std::vector<ibv_wc> wb = b.poll(1);
    REQUIRE(wb.size() == 1);
    CHECK(wb[0].status == IBV_WC_SUCCESS);
    CHECK(wb[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK(wb[0].byte_len == kLen);
    CHECK(be32toh(wb[0].imm_data) == 0xC0FFEE);
  }
  CHECK(std::memcmp(a.buf, b.buf, kLen) == 0);
  p.iterations(200);
  CHECK(a.poll_now().empty());  // once
  CHECK(b.poll_now().empty());
  p.with([&] {
    CHECK(receiver.k().dropped(Stage::kParse, DropReason::kBadIcrc) == 1);
    p.a_to_b = nullptr;
    p.b_to_a = nullptr;
  });
}

}  // namespace

TEST_CASE("port layer: a WRITE frame corrupted on the wire leaves no trace once retransmitted, go-back-N",
          "[port][icrc]") {
  run(Reliability::kGoBackN, false);
}

TEST_CASE("port layer: a WRITE frame corrupted on the wire leaves no trace once retransmitted, IRN", "[port][icrc]") {
  run(Reliability::kIrn, false);
}

TEST_CASE("port layer: a READ response corrupted on the wire leaves no trace once asked again, go-back-N",
          "[port][icrc]") {
  run(Reliability::kGoBackN, true);
}

TEST_CASE("port layer: a READ response corrupted on the wire leaves no trace once asked again, IRN", "[port][icrc]") {
  run(Reliability::kIrn, true);
}
