// UD QPs through the port layer (rnic/port/port_ud.cc) on the fake I/O, with
// real host interfaces: datagrams addressed by AH between two ports' UD QPs,
// the GRH naming overlay addresses, a destination outside the vNIC's routes
// dropped at egress, another partition's datagram dropped at ingress.
#include <catch2/catch.hpp>

#include <infiniband/verbs.h>

#include <cstring>
#include <vector>

#include "common/wire/byte_order.h"
#include "rnic/core/frame.h"
#include "rnic/host/verbs.h"
#include "tests/unit/port/port_harness.h"

using namespace tandem::rnic;
using namespace tandem::rnic::port;
using namespace tandem::rnic::port::test;
using tandem::common::DropReason;
namespace common = tandem::common;

namespace {

constexpr uint32_t kQkey = 0x11111111;
constexpr std::size_t kBuf = 16 * 1024;

// A tenant with one UD QP in RTS.
struct UdApp {
  explicit UdApp(const std::string& socket) {
    ctx = host::open_device(socket.c_str(), host::DeviceAttr{});
    REQUIRE(ctx != nullptr);
    pd = host::alloc_pd(ctx);
    buf = static_cast<uint8_t*>(host::alloc_buf(ctx, kBuf));
    mr = host::reg_mr(pd, buf, kBuf, IBV_ACCESS_LOCAL_WRITE);
    cq = host::create_cq(ctx, 256);
    REQUIRE(cq != nullptr);
    host::QpInitAttr init;
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_UD;
    init.cap.max_send_wr = init.cap.max_recv_wr = 16;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    qp = host::create_qp(pd, &init);
    REQUIRE(qp != nullptr);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = kQkey;
    REQUIRE(host::modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    REQUIRE(host::modify_qp(qp, &a, IBV_QP_STATE) == 0);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 1;
    REQUIRE(host::modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
  }
  ~UdApp() {
    host::destroy_qp(qp);
    host::destroy_cq(cq);
    host::dereg_mr(mr);
    host::free_buf(ctx, buf);
    host::dealloc_pd(pd);
    host::close_device(ctx);
  }
  host::Ah* ah(uint32_t overlay) {
    ibv_ah_attr at{};
    at.is_global = 1;
    at.port_num = 1;
    uint8_t* g = at.grh.dgid.raw;
    g[10] = g[11] = 0xFF;
    common::store_be32(g + 12, overlay);
    return host::create_ah(pd, &at);
  }
  int send(host::Ah* to, uint32_t qpn, uint32_t off, uint32_t len, uint32_t qkey = kQkey) {
    ibv_sge s{reinterpret_cast<uintptr_t>(buf) + off, len, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = off;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = &to->ibv;
    wr.wr.ud.remote_qpn = qpn;
    wr.wr.ud.remote_qkey = qkey;
    ibv_send_wr* bad = nullptr;
    return host::post_send(qp, &wr, &bad);
  }
  int recv(uint32_t off, uint32_t len) {
    ibv_sge s{reinterpret_cast<uintptr_t>(buf) + off, len, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = off;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return host::post_recv(qp, &wr, &bad);
  }
  std::vector<ibv_wc> poll(std::size_t n) {
    std::vector<ibv_wc> got;
    for (int i = 0; i < 50000 && got.size() < n; ++i) {
      ibv_wc wc[8];
      const int r = host::poll_cq(cq, 8, wc);
      if (r < 0) break;
      got.insert(got.end(), wc, wc + r);
      if (r == 0) usleep(100);
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

bool rts(Pair& p, const UdApp& a, const UdApp& b) {
  return p.wait_for([&] {
    const QpCtx* x = p.a.pw->qp_by_host(a.qp->qp_num);
    const QpCtx* y = p.b.pw->qp_by_host(b.qp->qp_num);
    return x && y && x->state == IBV_QPS_RTS && y->state == IBV_QPS_RTS;
  });
}

}  // namespace

TEST_CASE("port layer UD: datagrams by AH both ways, a GRH with overlay addresses, the sender's QPN") {
  Pair p;
  UdApp a(p.a.socket), b(p.b.socket);
  REQUIRE(rts(p, a, b));
  for (uint32_t i = 0; i < 64; ++i) a.buf[i] = static_cast<uint8_t>(i * 3);
  REQUIRE(b.recv(0, 40 + 1024) == 0);
  host::Ah* to_b = a.ah(Pair::kOverlayB);
  REQUIRE(to_b != nullptr);
  REQUIRE(a.send(to_b, b.qp->qp_num, 0, 64) == 0);
  const std::vector<ibv_wc> got = b.poll(1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_SUCCESS);
  CHECK(got[0].opcode == IBV_WC_RECV);
  CHECK(got[0].byte_len == 40 + 64);
  CHECK(got[0].src_qp == a.qp->qp_num);
  CHECK((got[0].wc_flags & IBV_WC_GRH) != 0);
  CHECK(std::memcmp(b.buf + 40, a.buf, 64) == 0);
  // The GRH's IPv4 header names the tenant's addresses, not the underlay's: B has sent
  // nothing to A, so A's address is its ingress entry's (a reply by ibv_create_ah_from_wc
  // must reach A: rdma-core's test_rdmacm UDP server does exactly that).
  CHECK(common::load_be32(b.buf + 20 + 12) == Pair::kOverlayA);
  CHECK(common::load_be32(b.buf + 20 + 16) == Pair::kOverlayB);
  const std::vector<ibv_wc> sent = a.poll(1);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].status == IBV_WC_SUCCESS);

  // The answer (A sent to B first, so B's reply GRH names B by A's route).
  host::Ah* to_a = b.ah(Pair::kOverlayA);
  REQUIRE(a.recv(4096, 40 + 1024) == 0);
  REQUIRE(b.send(to_a, a.qp->qp_num, 40, 64) == 0);
  const std::vector<ibv_wc> back = a.poll(1);
  REQUIRE(back.size() == 1);
  CHECK(back[0].byte_len == 40 + 64);
  CHECK(back[0].src_qp == b.qp->qp_num);
  CHECK(common::load_be32(a.buf + 4096 + 20 + 12) == Pair::kOverlayB);  // A sent to B: B's overlay
  CHECK(common::load_be32(a.buf + 4096 + 20 + 16) == Pair::kOverlayA);
  CHECK(std::memcmp(a.buf + 4096 + 40, a.buf, 64) == 0);
  host::destroy_ah(to_b);
  host::destroy_ah(to_a);
}

TEST_CASE("port layer UD: a destination outside the vNIC's routes and a wrong Q_Key are counted drops") {
  Pair p;
  UdApp a(p.a.socket), b(p.b.socket);
  REQUIRE(rts(p, a, b));
  REQUIRE(b.recv(0, 40 + 1024) == 0);
  host::Ah* stranger = a.ah(0xC0A80999);  // no egress entry from A's vNIC
  REQUIRE(a.send(stranger, b.qp->qp_num, 0, 32) == 0);
  REQUIRE(a.poll(1).size() == 1);  // unreliable: the sender's WR completes
  REQUIRE(p.wait_for([&] { return p.a.k().dropped(Stage::kEgress, DropReason::kTableMiss) == 1; }));
  host::Ah* to_b = a.ah(Pair::kOverlayB);
  REQUIRE(a.send(to_b, b.qp->qp_num, 0, 32, 0x2222) == 0);
  REQUIRE(p.wait_for([&] { return p.b.k().rx_packets == 1; }));
  p.iterations(20);
  CHECK(b.poll(1).empty());
  p.with([&] {
    CHECK(p.b.k().rx_accepted == 0);
    CHECK(p.b.k().dropped(Stage::kCore, DropReason::kBadQkey) == 1);
  });
  host::destroy_ah(stranger);
  host::destroy_ah(to_b);
}

TEST_CASE("port layer UD: a datagram of another partition is dropped before the QP") {
  Pair p;
  UdApp a(p.a.socket), b(p.b.socket);
  REQUIRE(rts(p, a, b));
  REQUIRE(b.recv(0, 40 + 1024) == 0);
  uint8_t data[32] = {};
  TxDesc d;
  d.bth.opcode = IBV_OPCODE_UD_SEND_ONLY;
  d.bth.dqpn = b.qp->qp_num;
  d.bth.pkey = 0x8005;  // not the vNIC's tenant's
  d.deth = common::Deth{kQkey, a.qp->qp_num};
  d.payload_len = sizeof data;
  d.num_segs = 1;
  d.segs[0] = TxSeg{data, sizeof data};
  d.udp_sport = common::kEntropyPortBase;
  FrameAddrs fa;
  fa.src_ip = Pair::kUnderlayA;
  fa.dst_ip = Pair::kUnderlayB;
  std::vector<uint8_t> f(2048);
  f.resize(build_frame(d, fa, f.data(), f.size()));
  REQUIRE(!f.empty());
  p.with([&] { REQUIRE(p.b.io.inject(f.data(), static_cast<uint32_t>(f.size()))); });
  REQUIRE(p.wait_for([&] { return p.b.k().dropped(Stage::kIngress, DropReason::kPkeyViolation) == 1; }));
  CHECK(b.poll(1).empty());
}
