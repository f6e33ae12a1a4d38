#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "rnic/host/host_server.h"
#include "rnic/host/verbs.h"
#include "server_thread.h"
#include "verbs_helpers.h"

using namespace tandem::rnic::host;
using tandem::rnic::host::test::App;
using tandem::rnic::host::test::post_one;
using tandem::rnic::host::test::ServerThread;
using tandem::rnic::host::test::to_rts;

TEST_CASE("an SGE past the end of its MR becomes a local protection error, then the QP flushes") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 1) == 0);
  REQUIRE(post_one(app.qp, 10, app.sge(App::kBufBytes - 100, 101)) == 0);  // one byte too far
  REQUIRE(post_one(app.qp, 11, app.sge(0, 100)) == 0);                     // fine, but after it
  std::vector<SendWork> w(4);
  st.with([&](HostServer& s) {
    CHECK(s.fetch_send(app.qp->qp_num, w) == 0);
    CHECK(s.counters().sge_out_of_bounds == 1);
    CHECK(s.qp_info(app.qp->qp_num)->state == IBV_QPS_ERR);
    HostEvent e;
    bool saw_err = false;
    while (s.next_event(&e)) {
      saw_err |= e.kind == HostEventKind::kQpStateChanged && e.state == IBV_QPS_ERR;
    }
    CHECK(saw_err);
    CHECK(s.fetch_send(app.qp->qp_num, w) == 0);  // in ERR: flushes what is left
    CHECK(s.counters().flushed_wqes == 1);
  });
  ibv_wc wc[2];
  REQUIRE(app.poll(wc, 2) == 2);
  CHECK(wc[0].wr_id == 10);
  CHECK(wc[0].status == IBV_WC_LOC_PROT_ERR);
  CHECK(wc[0].opcode == IBV_WC_RDMA_WRITE);
  CHECK(wc[1].wr_id == 11);
  CHECK(wc[1].status == IBV_WC_WR_FLUSH_ERR);
}

TEST_CASE("a wrong lkey becomes a local protection error completion") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 1) == 0);
  ibv_sge s = app.sge(0, 10);
  s.lkey ^= 0x100;  // a key the worker never issued
  REQUIRE(post_one(app.qp, 20, s, IBV_WR_SEND) == 0);
  SendWork w[1];
  st.with([&](HostServer& sv) {
    CHECK(sv.fetch_send(app.qp->qp_num, w) == 0);
    CHECK(sv.counters().bad_lkey == 1);
  });
  ibv_wc wc;
  REQUIRE(app.poll(&wc, 1) == 1);
  CHECK(wc.wr_id == 20);
  CHECK(wc.status == IBV_WC_LOC_PROT_ERR);
  CHECK(wc.opcode == IBV_WC_SEND);
}

TEST_CASE("an lkey of another application or another PD is refused like an unknown one") {
  ServerThread st;
  App a(st.path);
  App b(st.path);
  REQUIRE(to_rts(a.qp, 1) == 0);
  // a's QP names b's memory: the lkey is valid on the worker, but not a's.
  ibv_sge theirs = b.sge(0, 10);
  theirs.addr = reinterpret_cast<uintptr_t>(a.buf);
  REQUIRE(post_one(a.qp, 30, theirs) == 0);
  SendWork w[1];
  st.with([&](HostServer& s) { CHECK(s.fetch_send(a.qp->qp_num, w) == 0); });
  ibv_wc wc;
  REQUIRE(a.poll(&wc, 1) == 1);
  CHECK(wc.wr_id == 30);
  CHECK(wc.status == IBV_WC_LOC_PROT_ERR);

  // Same application, second PD.
  Pd* pd2 = alloc_pd(b.ctx);
  REQUIRE(pd2 != nullptr);
  auto* buf2 = static_cast<uint8_t*>(alloc_buf(b.ctx, 4096));
  Mr* mr2 = reg_mr(pd2, buf2, 4096, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(mr2 != nullptr);
  REQUIRE(to_rts(b.qp, 1) == 0);
  REQUIRE(post_one(b.qp, 31, ibv_sge{reinterpret_cast<uintptr_t>(buf2), 10, mr2->lkey}) == 0);
  st.with([&](HostServer& s) {
    CHECK(s.fetch_send(b.qp->qp_num, w) == 0);
    CHECK(s.counters().bad_lkey == 2);
  });
  REQUIRE(b.poll(&wc, 1) == 1);
  CHECK(wc.wr_id == 31);
  CHECK(wc.status == IBV_WC_LOC_PROT_ERR);
  dereg_mr(mr2);
  free_buf(b.ctx, buf2);
  dealloc_pd(pd2);
}

// An RC QP's bad receive is handed over marked: it fails when a message needs
// it, and the sender is NAKed (tests/unit/core: "a receive the host refused").
TEST_CASE("a receive buffer in a read-only MR is handed over marked invalid") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 1) == 0);
  auto* ro_buf = static_cast<uint8_t*>(alloc_buf(app.ctx, 4096));
  Mr* ro = reg_mr(app.pd, ro_buf, 4096, 0);
  REQUIRE(ro != nullptr);
  ibv_sge s{reinterpret_cast<uintptr_t>(ro_buf), 100, ro->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = 40;
  wr.sg_list = &s;
  wr.num_sge = 1;
  ibv_recv_wr* bad;
  REQUIRE(post_recv(app.qp, &wr, &bad) == 0);
  RecvWork r[1];
  st.with([&](HostServer& sv) {
    REQUIRE(sv.fetch_recv(app.qp->qp_num, r) == 1);
    CHECK(r[0].wr_id == 40);
    CHECK(r[0].invalid);
    CHECK(sv.counters().recv_wqes_invalid == 1);
    CHECK(sv.qp_info(app.qp->qp_num)->state == IBV_QPS_RTS);
  });
  dereg_mr(ro);
  free_buf(app.ctx, ro_buf);
}

TEST_CASE("good WQEs ahead of a bad one are handed over before the error completion") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 1) == 0);
  REQUIRE(post_one(app.qp, 1, app.sge(0, 10)) == 0);
  REQUIRE(post_one(app.qp, 2, app.sge(0, App::kBufBytes + 1)) == 0);
  SendWork w[4];
  st.with([&](HostServer& s) {
    REQUIRE(s.fetch_send(app.qp->qp_num, w) == 1);
    CHECK(w[0].wr_id == 1);
    CHECK(s.qp_info(app.qp->qp_num)->state == IBV_QPS_RTS);
    CHECK(s.complete_send(app.qp->qp_num, w[0], IBV_WC_SUCCESS));
    CHECK(s.fetch_send(app.qp->qp_num, w) == 0);
    CHECK(s.qp_info(app.qp->qp_num)->state == IBV_QPS_ERR);
  });
  ibv_wc wc[2];
  REQUIRE(app.poll(wc, 2) == 2);
  CHECK(wc[0].wr_id == 1);
  CHECK(wc[0].status == IBV_WC_SUCCESS);
  CHECK(wc[1].wr_id == 2);
  CHECK(wc[1].status == IBV_WC_LOC_PROT_ERR);
}

TEST_CASE("a scribbled producer index is reported as a corrupt ring, never followed") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 1) == 0);
  auto* sq = reinterpret_cast<RingControl*>(app.qp->queue_memory.data() +
                                            qp_queue_layout(16, 16).sq_control);
  sq->producer.store(123456789, std::memory_order_release);  // a buggy or hostile application
  SendWork w[4];
  st.with([&](HostServer& s) {
    CHECK(s.fetch_send(app.qp->qp_num, w) == 0);
    CHECK(s.counters().ring_corrupt == 1);
    CHECK(s.qp_info(app.qp->qp_num)->state == IBV_QPS_ERR);
  });
}

TEST_CASE("a full CQ loses the completion, counts an overrun and errors the QP") {
  ServerThread st;
  App app(st.path, 128, 16);  // CQ of 64, SQ of 128
  REQUIRE(to_rts(app.qp, 1) == 0);
  std::vector<SendWork> w(128);
  for (int i = 0; i < 65; ++i) REQUIRE(post_one(app.qp, static_cast<uint64_t>(i), app.sge(0, 8)) == 0);
  st.with([&](HostServer& s) {
    REQUIRE(s.fetch_send(app.qp->qp_num, w) == 65);
    for (int i = 0; i < 64; ++i) CHECK(s.complete_send(app.qp->qp_num, w[i], IBV_WC_SUCCESS));
    CHECK(s.cq_space(app.qp->qp_num, true) == 0);
    CHECK_FALSE(s.complete_send(app.qp->qp_num, w[64], IBV_WC_SUCCESS));
    CHECK(s.counters().cq_overruns == 1);
    CHECK(s.qp_info(app.qp->qp_num)->state == IBV_QPS_ERR);
  });
}
