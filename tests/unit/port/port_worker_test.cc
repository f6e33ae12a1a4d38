// The port layer (rnic/port/port_worker.h) on the fake I/O: two ports back to
// back, tenant applications attached through the real host interface, real
// frames between them. What the worker's Python system tests could only see
// from outside: QP lifecycle under traffic, route waits and their deadline,
// TX back-pressure, application death, remote access checks, counters.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <cstring>
#include <vector>

#include "common/wire/icrc.h"
#include "common/wire/opcode.h"
#include "port_harness.h"
#include "rnic/port/port_counters.h"
#include "rnic/host/verbs.h"

using namespace tandem;
using namespace tandem::rnic;
using namespace tandem::rnic::port;
using namespace tandem::rnic::port::test;
using common::DropReason;

namespace {

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr std::size_t kBufBytes = 64 * 1024;
constexpr uint32_t kRqPsn = 100;

// One tenant application on a port: PD, a registered buffer, a CQ, RC QPs.
struct Tenant {
  explicit Tenant(const std::string& socket, int access = kAllAccess) {
    host::DeviceAttr attr;
    attr.name = "port-test";
    ctx = host::open_device(socket.c_str(), attr);
    REQUIRE(ctx != nullptr);
    pd = host::alloc_pd(ctx);
    REQUIRE(pd != nullptr);
    buf = static_cast<uint8_t*>(host::alloc_buf(ctx, kBufBytes));
    REQUIRE(buf != nullptr);
    mr = host::reg_mr(pd, buf, kBufBytes, access);
    REQUIRE(mr != nullptr);
    cq = host::create_cq(ctx, 1024);
    REQUIRE(cq != nullptr);
  }
  ~Tenant() {
    for (host::Qp* q : qps) host::destroy_qp(q);
    host::destroy_cq(cq);
    if (mr != nullptr) host::dereg_mr(mr);
    host::free_buf(ctx, buf);
    host::dealloc_pd(pd);
    host::close_device(ctx);
  }
  Tenant(const Tenant&) = delete;
  Tenant& operator=(const Tenant&) = delete;
  uint32_t pd_handle() const { return pd->handle; }
  void dereg() {
    REQUIRE(host::dereg_mr(mr) == 0);
    mr = nullptr;
  }

  host::Qp* create_qp(uint32_t depth = 64) {
    host::QpInitAttr init;
    init.send_cq = cq;
    init.recv_cq = cq;
    init.cap.max_send_wr = depth;
    init.cap.max_recv_wr = depth;
    init.cap.max_send_sge = 2;
    init.cap.max_recv_sge = 2;
    init.cap.max_inline_data = 64;
    host::Qp* q = host::create_qp(pd, &init);
    REQUIRE(q != nullptr);
    qps.push_back(q);
    return q;
  }
  void destroy(host::Qp* q) {
    REQUIRE(host::destroy_qp(q) == 0);
    qps.erase(std::find(qps.begin(), qps.end(), q));
  }

  // INIT -> RTR (toward `remote_overlay`'s QP `remote_qpn`) -> RTS.
  static int connect(host::Qp* q, uint32_t remote_qpn, uint32_t remote_overlay) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = kAllAccess;
    if (int rc = host::modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      return rc;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = kRqPsn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    common::store_be32(gid + 12, remote_overlay);
    std::memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
    if (int rc = host::modify_qp(q, &a,
                                 IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      return rc;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = kRqPsn;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    return host::modify_qp(q, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  }

  int post(host::Qp* q, ibv_wr_opcode op, uint64_t wr_id, uint32_t off, uint32_t len, uint64_t remote_addr,
           uint32_t rkey) {
    ibv_sge s{reinterpret_cast<uintptr_t>(buf) + off, len, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return host::post_send(q, &wr, &bad);
  }
  int post_recv(host::Qp* q, uint64_t wr_id, uint32_t off, uint32_t len) {
    ibv_sge s{reinterpret_cast<uintptr_t>(buf) + off, len, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return host::post_recv(q, &wr, &bad);
  }
  uint64_t va(uint32_t off = 0) const { return reinterpret_cast<uint64_t>(buf) + off; }

  // Up to n completions within ~10 s of real time.
  std::vector<ibv_wc> poll(std::size_t n) {
    std::vector<ibv_wc> got;
    for (int i = 0; i < 100000 && got.size() < n; ++i) {
      ibv_wc wc[16];
      const int r = host::poll_cq(cq, static_cast<int>(std::min<std::size_t>(16, n - got.size())), wc);
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
  std::vector<host::Qp*> qps;
};

// A connected QP pair: ta's on port A, tb's on port B. The host interface
// answers modify_qp before the port logic applies it (next iteration):
// returns once both ports have (A's may be left waiting for its route).
struct Link {
  host::Qp* qa;
  host::Qp* qb;
};
Link connect(Pair& p, Tenant& ta, Tenant& tb) {
  Link l{ta.create_qp(), tb.create_qp()};
  REQUIRE(Tenant::connect(l.qa, l.qb->qp_num, Pair::kOverlayB) == 0);
  REQUIRE(Tenant::connect(l.qb, l.qa->qp_num, Pair::kOverlayA) == 0);
  REQUIRE(p.wait_for([&] {
    const QpCtx* a = p.a.pw->qp_by_host(l.qa->qp_num);
    const QpCtx* b = p.b.pw->qp_by_host(l.qb->qp_num);
    return a && b && a->state == IBV_QPS_RTS && b->state == IBV_QPS_RTS;
  }));
  return l;
}

void fill(uint8_t* p, std::size_t n, uint8_t seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
}

bool all_success(const std::vector<ibv_wc>& wcs) {
  for (const ibv_wc& w : wcs)
    if (w.status != IBV_WC_SUCCESS) return false;
  return true;
}

uint64_t dropped(const Node& n, Stage s, DropReason r) { return n.k().dropped(s, r); }

// A frame as port A would send it to B's QP `dqpn` (IRN WRITE_ONLY with its
// XETH), for tests that forge what arrives.
std::vector<uint8_t> forged_write(uint32_t dqpn, uint32_t psn, uint32_t rkey, uint64_t va, const uint8_t* data,
                                  uint32_t len, uint32_t src_underlay = Pair::kUnderlayA, uint16_t pkey = 0xFFFF) {
  TxDesc d;
  d.bth.opcode = IBV_OPCODE_RC_RDMA_WRITE_ONLY;
  d.bth.dqpn = dqpn;
  d.bth.psn = psn;
  d.bth.pkey = pkey;
  d.bth.ack_req = true;
  d.reth.va = va;
  d.reth.rkey = rkey;
  d.reth.len = len;
  d.has_xeth = true;
  d.xeth.msg_len = len;
  d.xeth.rkey = rkey;
  d.xeth.va = va;
  d.payload_len = len;
  d.num_segs = 1;
  d.segs[0] = TxSeg{data, len};
  d.udp_sport = common::kEntropyPortBase;
  FrameAddrs a;
  a.src_mac = {2, 0, 0, 0, 0, 1};
  a.dst_mac = {2, 0, 0, 0, 0, 2};
  a.src_ip = src_underlay;
  a.dst_ip = Pair::kUnderlayB;
  std::vector<uint8_t> f(2048);
  f.resize(build_frame(d, a, f.data(), f.size()));
  REQUIRE(!f.empty());
  return f;
}

}  // namespace

TEST_CASE("port layer: WRITE and SEND cross two ports, counted at each stage") {
  Pair p;
  Tenant ta(p.a.socket), tb(p.b.socket);
  Link l = connect(p, ta, tb);
  fill(ta.buf, 8192, 3);
  REQUIRE(tb.post_recv(l.qb, 77, 16384, 256) == 0);
  REQUIRE(ta.post(l.qa, IBV_WR_RDMA_WRITE, 1, 0, 8192, tb.va(0), tb.mr->rkey) == 0);
  REQUIRE(ta.post(l.qa, IBV_WR_SEND, 2, 100, 200, 0, 0) == 0);
  const auto wa = ta.poll(2);
  REQUIRE(wa.size() == 2);
  CHECK(all_success(wa));
  const auto wb = tb.poll(1);
  REQUIRE(wb.size() == 1);
  CHECK(wb[0].status == IBV_WC_SUCCESS);
  CHECK(wb[0].wr_id == 77);
  CHECK(wb[0].byte_len == 200);
  CHECK(std::memcmp(tb.buf, ta.buf, 8192) == 0);
  CHECK(std::memcmp(tb.buf + 16384, ta.buf + 100, 200) == 0);
  // Every frame A's port took reaches B's (the last ACKs may still be on their way back).
  REQUIRE(p.wait_for([&] { return p.b.k().rx_packets == p.a.k().tx_packets; }));
  p.with([&] {
    const WorkerCounters& ka = p.a.k();
    const WorkerCounters& kb = p.b.k();
    CHECK(ka.qps_created == 1);
    CHECK(kb.qps_created == 1);
    CHECK(ka.wqe_send == 2);
    CHECK(ka.cqe_send == 2);
    CHECK(kb.wqe_recv == 1);
    CHECK(kb.cqe_recv == 1);
    CHECK(ka.tx_packets >= 9);  // 8 KiB at MTU 1024, and the SEND
    CHECK(kb.rx_accepted >= 9);
    CHECK(ka.tx_bytes > 8192);
    CHECK(kb.dropped(Stage::kCore, DropReason::kAccessViolation) == 0);
    CHECK(ka.apps_attached == 1);
    for (std::size_t s = 0; s < static_cast<std::size_t>(Stage::kCount); ++s)
      for (std::size_t r = 1; r < common::kDropReasonCount; ++r) {
        CHECK(ka.drops[s][r] == 0);
        CHECK(kb.drops[s][r] == 0);
      }
    const QpCtx* q = p.a.pw->qp_by_host(l.qa->qp_num);
    REQUIRE(q != nullptr);
    CHECK(q->routed);
    CHECK(q->vnic == kVnic);
    CHECK(q->remote_overlay == Pair::kOverlayB);
    CHECK(q->remote_underlay == Pair::kUnderlayB);
    CHECK(q->mtu == 1024);
  });
}

TEST_CASE("port layer: unsignalled and inline WRs go from the ring into the core's slots; every ring slot comes back") {
  Pair p;
  Tenant ta(p.a.socket), tb(p.b.socket);
  Link l = connect(p, ta, tb);
  fill(ta.buf, 2048, 9);
  // Four times the SQ's 64 slots, one in 16 signalled: the ring slots of the
  // unsignalled ones must come back without a CQE, or the posts stall.
  constexpr uint32_t kWrs = 256;
  std::size_t signalled = 0;
  for (uint32_t i = 0; i < kWrs; ++i) {
    const bool sig = i % 16 == 15, inl = i % 2 == 0;
    uint8_t stage[64];
    std::memcpy(stage, ta.buf + i % 32 * 64, 64);
    ibv_sge s{inl ? reinterpret_cast<uintptr_t>(stage) : ta.va(i % 32 * 64), 64, ta.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = (sig ? unsigned{IBV_SEND_SIGNALED} : 0u) | (inl ? unsigned{IBV_SEND_INLINE} : 0u);
    wr.wr.rdma.remote_addr = tb.va(i * 64);
    wr.wr.rdma.rkey = tb.mr->rkey;
    ibv_send_wr* bad = nullptr;
    int rc = 0;
    for (int t = 0; t < 200000 && (rc = host::post_send(l.qa, &wr, &bad)) == static_cast<int>(host::Status::kQueueFull);
         ++t)
      usleep(50);
    REQUIRE(rc == 0);
    std::memset(stage, 0xEE, sizeof stage);  // inline bytes were taken at the post
    signalled += sig;
  }
  const auto wa = ta.poll(signalled);
  REQUIRE(wa.size() == signalled);
  CHECK(all_success(wa));
  for (std::size_t k = 0; k < wa.size(); ++k) CHECK(wa[k].wr_id == 16 * k + 15);
  CHECK(ta.poll(1).empty());  // nothing for the unsignalled ones
  for (uint32_t i = 0; i < kWrs; ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(tb.buf + i * 64, ta.buf + i % 32 * 64, 64) == 0);
  }
  p.with([&] {
    CHECK(p.a.k().wqe_send == kWrs);
    CHECK(p.a.k().cqe_send == kWrs);  // every WR completes in the core; the host writes the signalled ones
    CHECK(p.a.k().wqe_refused == 0);
  });
}

TEST_CASE("port layer: QPs created, connected and destroyed while another QP streams") {
  Pair p;
  Tenant ta(p.a.socket), tb(p.b.socket);
  Link stream = connect(p, ta, tb);
  fill(ta.buf, kBufBytes / 2, 9);
  constexpr int kRounds = 12;
  constexpr int kPerRound = 8;
  uint64_t done = 0;
  for (int round = 0; round < kRounds; ++round) {
    // The stream keeps going: 8 WRITEs of 2 KiB each round.
    for (int i = 0; i < kPerRound; ++i) {
      const uint32_t off = static_cast<uint32_t>(((round * kPerRound + i) % 16) * 2048);
      REQUIRE(ta.post(stream.qa, IBV_WR_RDMA_WRITE, 1000 + done + i, off, 2048, tb.va(off), tb.mr->rkey) == 0);
    }
    // Meanwhile a QP pair comes, moves one WRITE, and goes (or goes with work queued).
    Link l = connect(p, ta, tb);
    if (round % 3 != 2) {
      REQUIRE(ta.post(l.qa, IBV_WR_RDMA_WRITE, 5, 0, 64, tb.va(kBufBytes / 2), tb.mr->rkey) == 0);
    } else {
      for (int i = 0; i < 16; ++i)
        REQUIRE(ta.post(l.qa, IBV_WR_RDMA_WRITE, 6, 0, 1024, tb.va(kBufBytes / 2), tb.mr->rkey) == 0);
    }
    std::vector<ibv_wc> got = ta.poll(kPerRound + (round % 3 != 2 ? 1 : 0));
    ta.destroy(l.qa);
    tb.destroy(l.qb);
    std::size_t stream_ok = 0;
    for (const ibv_wc& w : got)
      if (w.qp_num == stream.qa->qp_num) {
        CHECK(w.status == IBV_WC_SUCCESS);
        ++stream_ok;
      }
    // Completions of the stream that the poll above left for later.
    while (stream_ok < kPerRound) {
      for (const ibv_wc& w : ta.poll(1))
        if (w.qp_num == stream.qa->qp_num) {
          CHECK(w.status == IBV_WC_SUCCESS);
          ++stream_ok;
        }
    }
    done += kPerRound;
  }
  CHECK(std::memcmp(tb.buf, ta.buf, 16 * 2048) == 0);
  REQUIRE(p.wait_for([&] { return p.a.k().qps_destroyed == kRounds && p.b.k().qps_destroyed == kRounds; }));
  p.with([&] {
    CHECK(p.a.k().qps_created == kRounds + 1);
    CHECK(p.a.pw->live_qps() == 1);
    CHECK(p.b.pw->live_qps() == 1);
    CHECK(p.a.k().qps_app_died == 0);
    CHECK(p.a.k().wqe_refused == 0);
  });
}

TEST_CASE("port layer: RTR waits for the agent's route, then the WQEs posted meanwhile flow") {
  Pair p(PairOptions{.dpu_a = true});
  Tenant ta(p.a.socket), tb(p.b.socket);
  fill(ta.buf, 4096, 5);
  Link l = connect(p, ta, tb);  // A's RTR finds no egress entry: it asks the agent and waits
  p.with([&] {
    const QpCtx* q = p.a.pw->qp_by_host(l.qa->qp_num);
    REQUIRE(q != nullptr);
    CHECK(q->route_pending);
    CHECK(!q->routed);
    CHECK(p.a.pw->route_waits() == 1);
    REQUIRE(!p.a.agent.punts.empty());
    CHECK(p.a.agent.punts[0] == common::egress_key(kVnic, Pair::kOverlayB));
  });
  REQUIRE(ta.post(l.qa, IBV_WR_RDMA_WRITE, 1, 0, 4096, tb.va(0), tb.mr->rkey) == 0);
  p.iterations(500);
  p.with([&] {
    CHECK(p.a.k().tx_packets == 0);
    CHECK(p.a.k().wqe_send == 0);  // the WQE waits in the application's ring
  });
  CHECK(ta.poll(1).empty());
  p.with([&] { p.a.add_route(); });  // the agent installs it
  const auto wa = ta.poll(1);
  REQUIRE(wa.size() == 1);
  CHECK(wa[0].status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(tb.buf, ta.buf, 4096) == 0);
  p.with([&] {
    const QpCtx* q = p.a.pw->qp_by_host(l.qa->qp_num);
    REQUIRE(q != nullptr);
    CHECK(!q->route_pending);
    CHECK(q->routed);
    CHECK(q->route_wait_ns >= 500 * 1000);  // 500 iterations of 1 us at least
    CHECK(p.a.pw->route_waits() == 0);
    CHECK(p.a.k().qps_no_route == 0);
  });
}

TEST_CASE("port layer: a route that never comes fails the QP at the deadline, not before") {
  Pair p(PairOptions{.dpu_a = true});
  Tenant ta(p.a.socket);
  constexpr uint32_t kNowhere = 0xC0A80709;  // no egress entry, ever
  host::Qp* q = ta.create_qp();
  REQUIRE(Tenant::connect(q, 0x4242, kNowhere) == 0);
  REQUIRE(p.wait_for([&] {
    const QpCtx* c = p.a.pw->qp_by_host(q->qp_num);
    return c && c->state == IBV_QPS_RTS && c->route_pending;
  }));
  REQUIRE(ta.post(q, IBV_WR_RDMA_WRITE, 9, 0, 64, 0x1000, 1) == 0);
  p.with([&] { p.now += kRouteWaitNs - 10'000'000; });  // 10 ms before the deadline
  p.iterations(2);
  const std::size_t punts = p.with([&] { return p.a.agent.punts.size(); });
  CHECK(punts >= 2);  // at RTR, and again on the rescans
  p.iterations(200);  // 0.2 ms: less than one rescan period
  p.with([&] {
    CHECK(p.a.k().qps_no_route == 0);
    CHECK(p.a.pw->route_waits() == 1);
    // Waiting QPs are looked at again (and re-punted) at most once a rescan period.
    CHECK(p.a.agent.punts.size() <= punts + 1);
    for (const common::EntryKey& k : p.a.agent.punts) CHECK(k == common::egress_key(kVnic, kNowhere));
  });
  p.with([&] { p.now += 20'000'000; });
  REQUIRE(p.wait_for([&] { return p.a.k().qps_no_route == 1; }));
  const auto wc = ta.poll(1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].wr_id == 9);
  CHECK(wc[0].status == IBV_WC_WR_FLUSH_ERR);
  REQUIRE(host::query_qp_state(q) == 0);
  CHECK(q->state == IBV_QPS_ERR);
  p.with([&] {
    CHECK(p.a.pw->route_waits() == 0);
    CHECK(p.a.k().tx_packets == 0);
  });
  // The lcore said so through its ring (drained by the control thread in the
  // worker, here by the test), keyed by the kind of line and the application.
  const uint32_t app = p.with([&] { return p.a.pw->qp_by_host(q->qp_num)->app_id; });
  std::vector<std::pair<uint64_t, std::string>> lines;
  p.a.pw->log().drain([&](common::LogRing::Level, uint64_t k, const char* t) { lines.emplace_back(k, t); },
                      [](uint64_t) {});
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].first == PortLogic::log_key(PortLogic::LogKind::kNoRoute, app));
  CHECK(lines[0].second.find("the agent installed no route to 192.168.7.9: QP to ERR") != std::string::npos);
}

TEST_CASE("port layer: frames the port refuses wait at the front of the burst; nothing is lost") {
  Pair p;
  Tenant ta(p.a.socket), tb(p.b.socket);
  Link l = connect(p, ta, tb);
  fill(ta.buf, 64 * 512, 11);
  p.with([&] { p.a.io.tx_room = 0; });  // the port takes nothing
  for (int i = 0; i < 64; ++i)
    REQUIRE(ta.post(l.qa, IBV_WR_RDMA_WRITE, static_cast<uint64_t>(i), static_cast<uint32_t>(i * 512), 512,
                    tb.va(static_cast<uint32_t>(i * 512)), tb.mr->rkey) == 0);
  REQUIRE(p.wait_for([&] { return p.a.pw->tx_held() == kBurst; }));
  p.iterations(200);
  p.with([&] {
    CHECK(p.a.pw->tx_held() == kBurst);  // a full burst held, the core's queue left alone
    CHECK(p.a.k().tx_packets == 0);
    CHECK(p.a.k().tx_backpressure > 0);
    CHECK(p.a.k().tx_not_sent == 0);
    CHECK(dropped(p.a, Stage::kEgress, DropReason::kNoBuffer) == 0);
    p.a.io.tx_room = 5;  // a few at a time, then all
  });
  p.iterations(50);
  p.with([&] {
    CHECK(p.a.k().tx_packets == 5);
    p.a.io.tx_room = FakeIo::kUnlimited;
  });
  const auto wa = ta.poll(64);
  REQUIRE(wa.size() == 64);
  CHECK(all_success(wa));
  for (int i = 0; i < 64; ++i) CHECK(wa[static_cast<std::size_t>(i)].wr_id == static_cast<uint64_t>(i));
  CHECK(std::memcmp(tb.buf, ta.buf, 64 * 512) == 0);
  p.with([&] {
    CHECK(p.a.pw->tx_held() == 0);
    CHECK(p.a.k().tx_retransmits == 0);  // held, not lost: nothing to recover by timeout
    CHECK(dropped(p.b, Stage::kCore, DropReason::kAccessViolation) == 0);
  });
}

TEST_CASE("port layer: no buffer for a frame is a counted egress drop, recovered by retransmission") {
  Pair p;
  Tenant ta(p.a.socket), tb(p.b.socket);
  Link l = connect(p, ta, tb);
  fill(ta.buf, 1024, 21);
  std::vector<FakeFrame*> held;
  p.with([&] {
    while (FakeFrame* f = p.a.io.alloc()) held.push_back(f);
  });
  REQUIRE(ta.post(l.qa, IBV_WR_RDMA_WRITE, 1, 0, 1024, tb.va(0), tb.mr->rkey) == 0);
  REQUIRE(p.wait_for([&] { return dropped(p.a, Stage::kEgress, DropReason::kNoBuffer) >= 1; }));
  p.with([&] {
    for (FakeFrame* f : held) p.a.io.release(f);
    p.now += 100'000'000;  // past the retransmission timeout
  });
  const auto wa = ta.poll(1);
  REQUIRE(wa.size() == 1);
  CHECK(wa[0].status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(tb.buf, ta.buf, 1024) == 0);
  p.with([&] { CHECK(p.a.k().tx_retransmits >= 1); });
}

TEST_CASE("port layer: an application killed with QPs and work in flight is cleaned up; the port goes on") {
  Pair p;
  Tenant tb(p.b.socket);
  host::Qp* sink = tb.create_qp();
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // A tenant on A with 4 QPs toward B (a QP there that is not connected, and
    // unknown QPNs: B drops their packets, A retransmits), WRITEs queued.
    close(fds[0]);
    host::Context* ctx = host::open_device(p.a.socket.c_str());
    if (ctx == nullptr) _exit(10);
    host::Pd* pd = host::alloc_pd(ctx);
    auto* buf = static_cast<uint8_t*>(host::alloc_buf(ctx, 1 << 16));
    host::Mr* mr = buf ? host::reg_mr(pd, buf, 1 << 16, IBV_ACCESS_LOCAL_WRITE) : nullptr;
    host::Cq* cq = host::create_cq(ctx, 256);
    if (mr == nullptr || cq == nullptr) _exit(11);
    for (int i = 0; i < 4; ++i) {
      host::QpInitAttr init;
      init.send_cq = cq;
      init.recv_cq = cq;
      init.cap.max_send_wr = 32;
      init.cap.max_recv_wr = 8;
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      host::Qp* q = host::create_qp(pd, &init);
      if (q == nullptr || Tenant::connect(q, i == 0 ? sink->qp_num : 0x7000 + i, Pair::kOverlayB) != 0) _exit(12);
      for (int w = 0; w < 16; ++w) {
        ibv_sge s{reinterpret_cast<uintptr_t>(buf), 4096, mr->lkey};
        ibv_send_wr wr{};
        wr.sg_list = &s;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(tb.buf);
        wr.wr.rdma.rkey = tb.mr->rkey;
        ibv_send_wr* bad = nullptr;
        if (host::post_send(q, &wr, &bad) != 0) _exit(13);
      }
    }
    const char ok = 1;
    if (write(fds[1], &ok, 1) != 1) _exit(14);
    pause();
    _exit(0);
  }
  close(fds[1]);
  char ok = 0;
  REQUIRE(read(fds[0], &ok, 1) == 1);
  close(fds[0]);
  REQUIRE(p.wait_for([&] { return p.a.k().tx_packets > 16; }));  // traffic in flight
  kill(child, SIGKILL);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(p.wait_for([&] { return p.a.k().qps_app_died == 4; }));
  p.with([&] {
    CHECK(p.a.k().apps_detached == 1);
    CHECK(p.a.k().qps_destroyed == 0);
    CHECK(p.a.pw->live_qps() == 0);
    CHECK(!p.a.pw->has_backlog());
  });
  // The port goes on: a new tenant on A moves data to B.
  Tenant ta(p.a.socket);
  Link l = connect(p, ta, tb);
  fill(ta.buf, 2048, 33);
  REQUIRE(ta.post(l.qa, IBV_WR_RDMA_WRITE, 1, 0, 2048, tb.va(8192), tb.mr->rkey) == 0);
  const auto wa = ta.poll(1);
  REQUIRE(wa.size() == 1);
  CHECK(wa[0].status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(tb.buf + 8192, ta.buf, 2048) == 0);
}

TEST_CASE("port layer: a bad R_Key, a VA out of bounds or missing access rights are refused") {
  // IRN checks each packet's RETH and XETH; go-back-N the first packet's RETH.
  const Reliability mode = GENERATE(Reliability::kIrn, Reliability::kGoBackN);
  INFO((mode == Reliability::kIrn ? "IRN" : "go-back-N"));
  Pair p(PairOptions{.mode = mode});
  Tenant ta(p.a.socket), tb(p.b.socket);
  Tenant tb_local(p.b.socket, IBV_ACCESS_LOCAL_WRITE);  // no remote access at all
  fill(ta.buf, 4096, 1);
  std::memset(tb.buf, 0xEE, kBufBytes);
  std::memset(tb_local.buf, 0xEE, kBufBytes);
  struct Case {
    const char* what;
    ibv_wr_opcode op;
    uint64_t va;
    uint32_t rkey;
    uint32_t len;
  };
  const Case cases[] = {
      {"unknown rkey", IBV_WR_RDMA_WRITE, tb.va(0), tb.mr->rkey ^ 0x5A5A00, 256},
      {"VA past the MR's end", IBV_WR_RDMA_WRITE, tb.va(kBufBytes - 128), tb.mr->rkey, 256},
      {"VA before the MR", IBV_WR_RDMA_WRITE, tb.va(0) - 4096, tb.mr->rkey, 256},
      {"a 4-packet WRITE running past the MR's end", IBV_WR_RDMA_WRITE, tb.va(kBufBytes - 2048), tb.mr->rkey, 4096},
      {"WRITE to an MR without REMOTE_WRITE", IBV_WR_RDMA_WRITE, tb_local.va(0), tb_local.mr->rkey, 256},
      {"READ of an MR without REMOTE_READ", IBV_WR_RDMA_READ, tb_local.va(0), tb_local.mr->rkey, 256},
  };
  uint64_t refused = 0;
  for (const Case& c : cases) {
    INFO(c.what);
    Link l = connect(p, ta, tb);  // the error takes the QP to ERR: a fresh pair per case
    REQUIRE(ta.post(l.qa, c.op, 1, 0, c.len, c.va, c.rkey) == 0);
    const auto wa = ta.poll(1);
    REQUIRE(wa.size() == 1);
    CHECK(wa[0].status == IBV_WC_REM_ACCESS_ERR);
    // Refused by B's core, against its own copy of B's MRs.
    const uint64_t now_refused = p.with([&] { return dropped(p.b, Stage::kCore, DropReason::kAccessViolation); });
    CHECK(now_refused > refused);
    refused = now_refused;
  }
  for (std::size_t i = 0; i < kBufBytes; ++i) {
    if (tb.buf[i] != 0xEE || tb_local.buf[i] != 0xEE) {
      FAIL("remote memory changed at " << i);
      break;
    }
  }
}

TEST_CASE("port layer: an MR of another PD or another application is out of reach, by R_Key or by L_Key") {
  Pair p;
  Tenant ta(p.a.socket), tb(p.b.socket);
  Tenant tother(p.b.socket);  // another application on B: its own PD and MR
  std::memset(tother.buf, 0xEE, kBufBytes);
  fill(ta.buf, 4096, 5);
  // A's peer QP on B belongs to tb; tother's valid rkey and VA are not tb's.
  for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ}) {
    INFO((op == IBV_WR_RDMA_WRITE ? "WRITE" : "READ"));
    const uint64_t before = p.with([&] { return dropped(p.b, Stage::kCore, DropReason::kAccessViolation); });
    Link l = connect(p, ta, tb);
    REQUIRE(ta.post(l.qa, op, 1, 0, 256, tother.va(0), tother.mr->rkey) == 0);
    const auto wa = ta.poll(1);
    REQUIRE(wa.size() == 1);
    CHECK(wa[0].status == IBV_WC_REM_ACCESS_ERR);
    CHECK(p.with([&] { return dropped(p.b, Stage::kCore, DropReason::kAccessViolation); }) > before);
  }
  for (std::size_t i = 0; i < kBufBytes; ++i)
    if (tother.buf[i] != 0xEE) FAIL("another application's memory changed at " << i);
  // The core knows every MR by its key and PD: a key of tb's PD in a WR of
  // tother's QP is refused by the core (the host interface's check agrees).
  p.with([&] {
    const Transport& core = p.b.pw->core();
    CHECK(core.find_mr(tb.mr->lkey, tb.pd_handle()) != nullptr);
    CHECK(core.find_mr(tb.mr->lkey, tother.pd_handle()) == nullptr);
    CHECK(core.find_mr(tother.mr->lkey, tother.pd_handle()) != nullptr);
  });
  // Deregistered: gone from the core too.
  const uint32_t key = tother.mr->lkey;
  const uint32_t pd = tother.pd_handle();
  tother.dereg();
  REQUIRE(p.wait_for([&] { return p.b.pw->core().find_mr(key, pd) == nullptr; }));
}

TEST_CASE("port layer: a forged frame naming a raw worker address or a wrong key is refused") {
  Pair p;
  Tenant ta(p.a.socket), tb(p.b.socket);
  Link l = connect(p, ta, tb);
  std::memset(tb.buf, 0xEE, 4096);
  uint8_t evil[256];
  std::memset(evil, 0x66, sizeof evil);
  // In this one process the application's address of its buffer is a worker
  // address too: keys next to the real one (a generation off, key 0, the
  // first index) with that address must all be refused.
  const uint64_t app_ptr = reinterpret_cast<uint64_t>(tb.buf);
  for (uint32_t rkey : {0x101u, 0u, tb.mr->rkey + 1}) {
    const std::vector<uint8_t> f = forged_write(l.qb->qp_num, kRqPsn, rkey, app_ptr, evil, sizeof evil);
    p.with([&] { REQUIRE(p.b.io.inject(f.data(), static_cast<uint32_t>(f.size()))); });
  }
  REQUIRE(p.wait_for([&] { return p.b.k().rx_packets >= 3; }));
  p.iterations(20);
  // The core refused each (its MR check), NAKed and took the QP to ERR:
  // the first is refused for its key, the next two arrive at a QP in error.
  CHECK(p.with([&] { return dropped(p.b, Stage::kCore, DropReason::kAccessViolation); }) >= 1);
  for (int i = 0; i < 4096; ++i)
    if (tb.buf[i] != 0xEE) FAIL("placed at " << i);
}

TEST_CASE("port layer: frames refused before the core are counted by stage and reason") {
  Pair p;
  Tenant ta(p.a.socket), tb(p.b.socket);
  Link l = connect(p, ta, tb);
  uint8_t data[64] = {};
  const uint32_t q = l.qb->qp_num;
  auto inject = [&](std::vector<uint8_t> f) {
    p.with([&] { REQUIRE(p.b.io.inject(f.data(), static_cast<uint32_t>(f.size()))); });
  };
  std::vector<uint8_t> bad_icrc = forged_write(q, kRqPsn, tb.mr->rkey, tb.va(0), data, 64);
  bad_icrc.back() ^= 0xFF;
  inject(bad_icrc);
  inject(std::vector<uint8_t>(bad_icrc.begin(), bad_icrc.begin() + 30));  // truncated in the IPv4 header
  inject(forged_write(0x00FFFF, kRqPsn, tb.mr->rkey, tb.va(0), data, 64));                // no such QP
  inject(forged_write(q, kRqPsn, tb.mr->rkey, tb.va(0), data, 64, 0x0A000009));           // from another underlay
  inject(forged_write(q, kRqPsn, tb.mr->rkey, tb.va(0), data, 64, Pair::kUnderlayA, 0x8005));  // another partition
  // 512 B WRITEs have their ICRC checked by the core as it places them
  // (rx_stage.h kDeferIcrcFrom): a corrupted one is still a bad ICRC, whether
  // it reaches the core or names no QP.
  uint8_t big[512] = {};
  std::vector<uint8_t> bad_big = forged_write(q, kRqPsn, tb.mr->rkey, tb.va(0), big, sizeof big);
  bad_big[bad_big.size() - 100] ^= 0x01;
  inject(bad_big);
  bad_big = forged_write(0x00FFFF, kRqPsn, tb.mr->rkey, tb.va(0), big, sizeof big);
  bad_big[bad_big.size() - 100] ^= 0x01;
  inject(bad_big);
  REQUIRE(p.wait_for([&] { return p.b.k().rx_packets == 7; }));
  p.with([&] {
    const Node& b = p.b;
    CHECK(dropped(b, Stage::kParse, DropReason::kBadIcrc) == 3);
    uint64_t parse = 0;
    for (std::size_t r = 1; r < common::kDropReasonCount; ++r) parse += b.k().drops[0][r];
    CHECK(parse == 4);
    CHECK(dropped(b, Stage::kIngress, DropReason::kUnknownQpn) == 1);
    CHECK(dropped(b, Stage::kIngress, DropReason::kTenantMismatch) == 1);
    CHECK(dropped(b, Stage::kIngress, DropReason::kPkeyViolation) == 1);
    CHECK(b.k().rx_accepted == 0);
    CHECK(b.k().dropped(Stage::kCore, DropReason::kAccessViolation) == 0);  // refused before the rkey was looked at
  });
}

// A tracer over an in-memory ring (the worker's ring is a shared-memory file).
struct TestTracer {
  static constexpr uint64_t kCap = 4096;
  std::vector<uint64_t> mem = std::vector<uint64_t>(common::trace::ring_bytes(kCap) / 8 + 1);
  common::trace::Tracer t;
  TestTracer() { t.attach(common::trace::ring_init(mem.data(), kCap, 0, "test")); }
  // Records of `stage` (kNone: any) for destination QP `dqpn` (0: any).
  std::size_t count(common::trace::Stage stage, uint32_t dqpn = 0) const {
    std::size_t n = 0;
    for (const common::trace::Record& r : common::trace::ring_read(t.ring()))
      if ((stage == common::trace::Stage::kNone || r.stage == stage) && (dqpn == 0 || r.dqpn == dqpn)) ++n;
    return n;
  }
};

// Installs `r` (nullptr: stop) in both ports and waits until their lcores adopted it.
void trace_rule(Pair& p, TestTracer& ta, TestTracer& tb, const common::trace::Rule* r) {
  const uint64_t ga = p.with([&] { return ta.t.generation(); }), gb = p.with([&] { return tb.t.generation(); });
  for (TestTracer* t : {&ta, &tb}) r ? t->t.request(*r) : t->t.stop();
  REQUIRE(p.wait_for([&] { return ta.t.generation() != ga && tb.t.generation() != gb; }));
}

TraceFlags flags(Pair& p, Node& n, host::Qp* q) {
  return p.with([&] {
    const QpCtx* c = n.pw->qp_by_host(q->qp_num);
    REQUIRE(c != nullptr);
    return c->trace;
  });
}

void write_once(Tenant& ta, Tenant& tb, host::Qp* q, uint64_t id) {
  REQUIRE(ta.post(q, IBV_WR_RDMA_WRITE, id, 0, 256, tb.va(0), tb.mr->rkey) == 0);
  const auto wc = ta.poll(1);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == IBV_WC_SUCCESS);
}

TEST_CASE("port layer: a trace rule is compiled into QP flags: over live QPs, for new ones, until stopped or destroyed") {
  using common::trace::Stage;
  TestTracer ra, rb;  // before the pair: its lcore thread writes them until the pair stops
  Pair p;
  p.with([&] {
    p.a.pw->set_tracer(&ra.t);
    p.b.pw->set_tracer(&rb.t);
  });
  Tenant ta(p.a.socket), tb(p.b.socket);
  Link l1 = connect(p, ta, tb);
  write_once(ta, tb, l1.qa, 1);  // both routes resolved
  CHECK_FALSE(flags(p, p.a, l1.qa).rx);
  CHECK_FALSE(flags(p, p.a, l1.qa).tx);

  // Adopted after the QPs exist: the rule names l1's QPs.
  common::trace::Rule r1;
  r1.ip_a = Pair::kUnderlayA;
  r1.ip_b = Pair::kUnderlayB;
  r1.qpns[0] = l1.qa->qp_num;
  r1.qpns[1] = l1.qb->qp_num;
  r1.n_qpns = 2;
  trace_rule(p, ra, rb, &r1);
  for (auto [n, q] : {std::pair{&p.a, l1.qa}, std::pair{&p.b, l1.qb}}) {
    CHECK(flags(p, *n, q).rx);
    CHECK(flags(p, *n, q).tx);
  }
  // Created under it, not named by it: received packets are not flagged;
  // sent ones are (the pair matches) and the rule then refuses their QPN.
  Link l2 = connect(p, ta, tb);
  write_once(ta, tb, l2.qa, 2);
  write_once(ta, tb, l1.qa, 3);
  CHECK_FALSE(flags(p, p.a, l2.qa).rx);
  CHECK_FALSE(flags(p, p.b, l2.qb).rx);
  CHECK(flags(p, p.a, l2.qa).tx);
  REQUIRE(p.wait_for([&] { return rb.count(Stage::kTx, l1.qa->qp_num) > 0; }));  // l1's ACK left B
  CHECK(ra.count(Stage::kTx, l1.qb->qp_num) > 0);
  CHECK(rb.count(Stage::kRxCore, l1.qb->qp_num) > 0);
  CHECK(ra.count(Stage::kNone, l2.qb->qp_num) + rb.count(Stage::kNone, l2.qb->qp_num) == 0);
  CHECK(ra.count(Stage::kNone, l2.qa->qp_num) + rb.count(Stage::kNone, l2.qa->qp_num) == 0);

  // A rule over the pair, any QP: adopted over l2 too; l3 is created under it.
  common::trace::Rule r2 = r1;
  r2.n_qpns = 0;
  trace_rule(p, ra, rb, &r2);
  CHECK(flags(p, p.a, l2.qa).rx);
  CHECK(flags(p, p.b, l2.qb).rx);
  Link l3 = connect(p, ta, tb);
  write_once(ta, tb, l3.qa, 4);
  CHECK(flags(p, p.a, l3.qa).rx);
  CHECK(flags(p, p.b, l3.qb).rx);
  CHECK(flags(p, p.a, l3.qa).tx);
  REQUIRE(p.wait_for([&] { return rb.count(Stage::kRxCore, l3.qb->qp_num) > 0; }));
  // A foreign frame (another partition) has no QP flag: matched where it is dropped.
  uint8_t data[64] = {};
  const std::vector<uint8_t> foreign =
      forged_write(l1.qb->qp_num, kRqPsn, tb.mr->rkey, tb.va(0), data, 64, Pair::kUnderlayA, 0x8005);
  p.with([&] { REQUIRE(p.b.io.inject(foreign.data(), static_cast<uint32_t>(foreign.size()))); });
  REQUIRE(p.wait_for([&] { return rb.count(Stage::kRxIngress, l1.qb->qp_num) == 1; }));

  // A rule that matches nothing here: no flag, no record.
  common::trace::Rule r3;
  r3.ip_a = 0x01020304;
  trace_rule(p, ra, rb, &r3);
  CHECK(ra.t.running());
  for (host::Qp* q : {l1.qa, l2.qa, l3.qa}) {
    CHECK_FALSE(flags(p, p.a, q).rx);
    CHECK_FALSE(flags(p, p.a, q).tx);
  }
  const uint64_t wa = ra.t.written(), wb = rb.t.written();
  write_once(ta, tb, l1.qa, 5);
  p.iterations(50);
  CHECK(ra.t.written() == wa);
  CHECK(rb.t.written() == wb);

  // Removed: every flag cleared, nothing recorded.
  trace_rule(p, ra, rb, &r2);
  CHECK(flags(p, p.a, l1.qa).tx);
  trace_rule(p, ra, rb, nullptr);
  CHECK_FALSE(ra.t.running());
  for (host::Qp* q : {l1.qa, l2.qa, l3.qa}) {
    CHECK_FALSE(flags(p, p.a, q).rx);
    CHECK_FALSE(flags(p, p.a, q).tx);
  }
  // Destroyed under a rule: its slot keeps no flag for the next QP.
  trace_rule(p, ra, rb, &r2);
  const uint32_t gone = l3.qa->qp_num;
  ta.destroy(l3.qa);
  tb.destroy(l3.qb);
  REQUIRE(p.wait_for([&] { return p.a.pw->qp_by_host(gone) == nullptr; }));
  p.with([&] {
    for (const QpCtx& c : p.a.pw->qps())
      if (!c.live) {
        CHECK_FALSE(c.trace.rx);
        CHECK_FALSE(c.trace.tx);
      }
  });
  Link l4 = connect(p, ta, tb);  // may reuse l3's slot; flagged only once its route is resolved
  write_once(ta, tb, l4.qa, 6);
  CHECK(flags(p, p.a, l4.qa).rx);

  // Adopted while no QP is live: TX then tests no flag per packet until a
  // route the rule matches resolves, and that QP's first packets are recorded.
  trace_rule(p, ra, rb, nullptr);
  for (Link* l : {&l1, &l2, &l4}) {
    ta.destroy(l->qa);
    tb.destroy(l->qb);
  }
  REQUIRE(p.wait_for([&] { return p.a.pw->live_qps() == 0 && p.b.pw->live_qps() == 0; }));
  trace_rule(p, ra, rb, &r2);
  Link l5 = connect(p, ta, tb);
  write_once(ta, tb, l5.qa, 7);
  REQUIRE(p.wait_for([&] { return ra.count(Stage::kTx, l5.qb->qp_num) > 0; }));  // the WRITE left A
  CHECK(rb.count(Stage::kTx, l5.qa->qp_num) > 0);  // its ACK left B
}

TEST_CASE("port layer: every counter is one row (group, name, help) and each live QP one snapshot row") {
  Pair p;
  Tenant ta(p.a.socket), tb(p.b.socket);
  Link l = connect(p, ta, tb);
  fill(ta.buf, 4096, 7);
  REQUIRE(ta.post(l.qa, IBV_WR_RDMA_WRITE, 1, 0, 4096, tb.va(0), tb.mr->rkey) == 0);
  REQUIRE(ta.poll(1).size() == 1);
  uint8_t data[32] = {};
  const std::vector<uint8_t> stray = forged_write(0x00FFFF, kRqPsn, tb.mr->rkey, tb.va(0), data, 32);
  p.with([&] { REQUIRE(p.b.io.inject(stray.data(), static_cast<uint32_t>(stray.size()))); });
  REQUIRE(p.wait_for([&] { return dropped(p.b, Stage::kIngress, DropReason::kUnknownQpn) == 1; }));
  p.with([&] {
    std::map<std::string, uint64_t> rows;
    int io_rows = 0, more_rows = 0;
    p.b.pw->visit_counters(
        [&](const char* g, const char* n, uint64_t v, const char* help) {
          const std::string key = std::string(g) + "/" + n;
          CHECK(rows.count(key) == 0);  // visited once
          CHECK(std::strlen(help) > 0);
          rows[key] = v;
        },
        [&](auto&& f) {
          ++io_rows;
          CHECK(rows.count("drops.ingress/unknown_qpn") == 1);  // after the drops
          f("io", "x", 7, "the I/O layer's row");
        },
        [&](auto&&) {
          ++more_rows;
          CHECK(rows.count("/live_qps") == 0);  // before live_qps
        });
    CHECK(io_rows == 1);
    CHECK(more_rows == 1);
    const WorkerCounters& k = p.b.k();
    CHECK(rows["worker/rx_packets"] == k.rx_packets);
    CHECK(rows["worker/rx_accepted"] == k.rx_accepted);
    CHECK(rows["drops.ingress/unknown_qpn"] == 1);
    CHECK(rows.count("drops.parse/bad_icrc") == 0);  // only the drops that happened
    CHECK(rows["io/x"] == 7);
    CHECK(rows["core/rx_pkts"] == p.b.pw->core().counters().rx_pkts);
    CHECK(rows["host/recv_wqes"] == p.b.host->counters().recv_wqes);
    CHECK(rows["table/entries"] == 2);  // the egress and ingress entries of add_route
    CHECK(rows["vnics/count"] == 1);
    CHECK(rows["/live_qps"] == 1);

    QpRows q;
    q.rows.resize(4);
    p.a.pw->fill_qp_rows(q);
    REQUIRE(q.n == 1);
    const QpRow& r = q.rows[0];
    CHECK(r.host_qpn == l.qa->qp_num);
    CHECK(r.state == IBV_QPS_RTS);
    CHECK(r.vnic == kVnic);
    CHECK(r.remote_overlay == Pair::kOverlayB);
    CHECK(r.remote_underlay == Pair::kUnderlayB);
    CHECK(r.mtu == 1024);
    CHECK(!r.route_pending);
    REQUIRE(r.has_counters);
    CHECK(r.tx_pkts >= 4);
    CHECK(r.paths >= 1);
  });
}

TEST_CASE("port layer: a QP moved to ERR under traffic completes every WQE, finished or flushed") {
  Pair p;
  Tenant ta(p.a.socket), tb(p.b.socket);
  Link l = connect(p, ta, tb);
  Link other = connect(p, ta, tb);
  fill(ta.buf, kBufBytes, 13);
  constexpr int kWrites = 48;
  p.with([&] { p.deliver = false; });  // in flight, unacknowledged, until the QP is in ERR
  for (int i = 0; i < kWrites; ++i)
    REQUIRE(ta.post(l.qa, IBV_WR_RDMA_WRITE, static_cast<uint64_t>(i), 0, 4096, tb.va(0), tb.mr->rkey) == 0);
  REQUIRE(p.wait_for([&] { return p.a.k().wqe_send > 0; }));  // some of it in the core
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  REQUIRE(host::modify_qp(l.qa, &a, IBV_QP_STATE) == 0);
  REQUIRE(p.wait_for([&] { return p.a.pw->qp_by_host(l.qa->qp_num)->state == IBV_QPS_ERR; }));
  p.with([&] { p.deliver = true; });
  std::vector<ibv_wc> wa = ta.poll(kWrites);
  REQUIRE(wa.size() == kWrites);
  std::size_t ok = 0, flushed = 0;
  for (std::size_t i = 0; i < wa.size(); ++i) {
    CHECK(wa[i].wr_id == i);  // in order, each once
    if (wa[i].status == IBV_WC_SUCCESS) {
      CHECK(flushed == 0);  // no success after the first flush
      ++ok;
    } else {
      CHECK(wa[i].status == IBV_WC_WR_FLUSH_ERR);
      ++flushed;
    }
  }
  CHECK(flushed > 0);
  // The other QP on the same ports is untouched.
  REQUIRE(ta.post(other.qa, IBV_WR_RDMA_WRITE, 99, 0, 4096, tb.va(8192), tb.mr->rkey) == 0);
  const auto wo = ta.poll(1);
  REQUIRE(wo.size() == 1);
  CHECK(wo[0].status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(tb.buf + 8192, ta.buf, 4096) == 0);
  p.with([&] {
    const QpCtx* q = p.a.pw->qp_by_host(l.qa->qp_num);
    REQUIRE(q != nullptr);
    CHECK(q->state == IBV_QPS_ERR);
    CHECK(p.a.k().cqe_send == p.a.k().wqe_send);  // what the core took, it gave back
    CHECK(p.a.k().cqe_lost == 0);
  });
}

TEST_CASE("port layer: one application's deep rings on many QPs take a bounded share of a loop turn; another's WQE goes at once") {
  Pair p;
  Tenant th(p.a.socket), tv(p.a.socket), tb(p.b.socket);
  constexpr int kQps = 24, kDepth = 256;
  std::vector<Link> hl;
  for (int i = 0; i < kQps; ++i) {
    Link l{th.create_qp(kDepth), tb.create_qp(kDepth)};
    REQUIRE(Tenant::connect(l.qa, l.qb->qp_num, Pair::kOverlayB) == 0);
    REQUIRE(Tenant::connect(l.qb, l.qa->qp_num, Pair::kOverlayA) == 0);
    hl.push_back(l);
  }
  Link vl = connect(p, tv, tb);
  REQUIRE(p.wait_for([&] {
    for (const Link& l : hl)
      if (p.a.pw->qp_by_host(l.qa->qp_num) == nullptr || p.a.pw->qp_by_host(l.qa->qp_num)->state != IBV_QPS_RTS)
        return false;
    return true;
  }));
  p.stop();  // the test drives port A's loop turns itself from here
  const uint64_t start_ns = p.now;
  // The hostile application rings first, with every ring full; then the victim posts one WRITE.
  for (const Link& l : hl)
    for (int k = 0; k < kDepth; ++k)
      REQUIRE(th.post(l.qa, IBV_WR_RDMA_WRITE, static_cast<uint64_t>(k), 0, 64, tb.va(0), tb.mr->rkey) == 0);
  REQUIRE(tv.post(vl.qa, IBV_WR_RDMA_WRITE, 1, 0, 64, tb.va(4096), tb.mr->rkey) == 0);
  const uint64_t before = p.a.k().wqe_send;
  uint64_t now = start_ns + 1000;
  p.a.step(now);
  const uint64_t first = p.a.k().wqe_send - before;
  CHECK(first <= PortLogic::kWqesPerTurn);
  CHECK(p.a.host->send_queued(vl.qa->qp_num) == 0);  // the victim's WQE went in the first turn
  CHECK(first <= PortLogic::kWqesPerApp + 1);       // the hostile one got its quantum, not its rings
  // And the hostile application is not starved either: every turn takes some of its WQEs.
  for (int t = 0; t < 8; ++t) {
    const uint64_t w = p.a.k().wqe_send;
    p.a.step(now += 1000);
    CHECK(p.a.k().wqe_send > w);
  }
  p.now = now + 1000;  // the clock only moves forward
  p.start();
}

TEST_CASE("port layer: an application that never polls its CQ loses only its own completions") {
  Pair p;
  Tenant ta(p.a.socket), tv(p.a.socket), tb(p.b.socket);
  // A 16-entry CQ that nobody polls, under 64 signalled WRITEs.
  host::Cq* small = host::create_cq(ta.ctx, 16);
  REQUIRE(small != nullptr);
  host::QpInitAttr init;
  init.send_cq = small;
  init.recv_cq = small;
  init.cap.max_send_wr = 64;
  init.cap.max_recv_wr = 64;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  host::Qp* q = host::create_qp(ta.pd, &init);
  REQUIRE(q != nullptr);
  host::Qp* qb = tb.create_qp();
  REQUIRE(Tenant::connect(q, qb->qp_num, Pair::kOverlayB) == 0);
  REQUIRE(Tenant::connect(qb, q->qp_num, Pair::kOverlayA) == 0);
  Link vl = connect(p, tv, tb);
  for (int i = 0; i < 64; ++i)
    REQUIRE(ta.post(q, IBV_WR_RDMA_WRITE, static_cast<uint64_t>(i), 0, 256, tb.va(0), tb.mr->rkey) == 0);
  fill(tv.buf, 4096, 5);
  for (int i = 0; i < 32; ++i)
    REQUIRE(tv.post(vl.qa, IBV_WR_RDMA_WRITE, static_cast<uint64_t>(100 + i), 0, 4096, tb.va(8192), tb.mr->rkey) == 0);
  const auto wv = tv.poll(32);
  REQUIRE(wv.size() == 32);
  CHECK(all_success(wv));
  CHECK(std::memcmp(tb.buf + 8192, tv.buf, 4096) == 0);
  REQUIRE(p.wait_for([&] { return p.a.host->counters().cq_overruns > 0; }));
  REQUIRE(p.wait_for([&] { return p.a.pw->qp_by_host(q->qp_num)->state == IBV_QPS_ERR; }));
  CHECK(p.a.pw->qp_by_host(vl.qa->qp_num)->state == IBV_QPS_RTS);
  REQUIRE(host::destroy_qp(q) == 0);
  REQUIRE(host::destroy_cq(small) == 0);
}

TEST_CASE("port layer: DPU mode on two lcores: a QP on lcore 1 waits for its route until lcore 1 adopts the version; "
          "the agent hears COMMITTED only then") {
  Pair p(PairOptions{.lanes_a = true});
  // The vNIC's version (1) is told once both lcores acknowledged it.
  REQUIRE(p.wait_for([&] { return p.a.committed_told() == std::vector<uint64_t>{1}; }));
  Tenant ta(p.a.socket), tb(p.b.socket);
  fill(ta.buf, 4096, 9);
  Link l = connect(p, ta, tb);  // lcore 1's RTR finds no egress entry: it hands the miss to lcore 0 and waits
  REQUIRE(p.wait_for([&] { return !p.a.handed.empty(); }));
  p.with([&] {
    CHECK(p.a.handed[0] == common::egress_key(kVnic, Pair::kOverlayB));
    CHECK(p.a.lane1->counters().punts_handed >= 1);
    const QpCtx* q = p.a.pw->qp_by_host(l.qa->qp_num);
    REQUIRE(q != nullptr);
    CHECK(q->route_pending);
  });
  REQUIRE(ta.post(l.qa, IBV_WR_RDMA_WRITE, 1, 0, 4096, tb.va(0), tb.mr->rkey) == 0);
  // The agent installs the route (version 2) while lcore 1 does not adopt: lcore 0
  // publishes and sees it, the table holds it, but lcore 1 reads at version 1.
  p.with([&] {
    p.a.adopt = false;
    p.a.agent_txn({p.a.route_entry()}, {});
    CHECK(p.a.table.version() == 2);
  });
  p.iterations(300);
  p.with([&] {
    CHECK(p.a.lane0->view()->snap.version == 2);
    CHECK(p.a.lane1->view()->snap.version == 1);
    CHECK(p.a.fanout->visible_version() == 1);
    CHECK(p.a.committed_told() == std::vector<uint64_t>{1});  // COMMITTED(2) held back
    const QpCtx* q = p.a.pw->qp_by_host(l.qa->qp_num);
    REQUIRE(q != nullptr);
    CHECK(q->route_pending);  // its lcore has not seen version 2
    CHECK(p.a.k().tx_packets == 0);
  });
  CHECK(ta.poll(1).empty());
  p.with([&] { p.a.adopt = true; });
  const auto wa = ta.poll(1);
  REQUIRE(wa.size() == 1);
  CHECK(wa[0].status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(tb.buf, ta.buf, 4096) == 0);
  p.with([&] {
    CHECK(p.a.committed_told() == std::vector<uint64_t>{1, 2});
    CHECK(p.a.pw->route_waits() == 0);
    CHECK(p.a.k().qps_no_route == 0);
  });
}
