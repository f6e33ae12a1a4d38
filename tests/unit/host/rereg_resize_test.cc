// ibv_rereg_mr's PD and access changes (in place, keys kept), ibv_resize_cq
// (unpolled completions carried over, a ring too small refused) and a QP moved
// to RESET leaving its CQ (its completions cleaned out, none written after).
#include <catch2/catch.hpp>

#include "rnic/host/host_server.h"
#include "rnic/host/verbs.h"
#include "server_thread.h"
#include "verbs_helpers.h"

using namespace tandem::rnic::host;
using tandem::rnic::host::test::App;
using tandem::rnic::host::test::post_one;
using tandem::rnic::host::test::ServerThread;
using tandem::rnic::host::test::to_rts;

TEST_CASE("rereg_mr moves an MR to another PD and back, keys unchanged; the fast path checks the new PD") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 1) == 0);
  const uint32_t lkey = app.mr->lkey;
  Pd* other = alloc_pd(app.ctx);
  REQUIRE(other != nullptr);
  REQUIRE(rereg_mr(app.mr, other, -1) == 0);
  CHECK(app.mr->lkey == lkey);
  CHECK(app.mr->pd == other);
  CHECK(dealloc_pd(other) == static_cast<int>(Status::kBusy));  // the MR is in it now
  REQUIRE(post_one(app.qp, 1, app.sge(0, 64)) == 0);
  SendWork w[2];
  st.with([&](HostServer& s) {
    CHECK(s.fetch_send(app.qp->qp_num, w) == 0);  // an lkey of another PD
    CHECK(s.counters().bad_lkey == 1);
  });
  ibv_wc wc;
  REQUIRE(app.poll(&wc, 1) == 1);
  CHECK(wc.status == IBV_WC_LOC_PROT_ERR);
  REQUIRE(rereg_mr(app.mr, app.pd, -1) == 0);
  CHECK(dealloc_pd(other) == 0);
  // Bad input: a PD that is not the application's, an MR that is not.
  Pd stranger = *app.pd;
  stranger.handle ^= 0x7700;
  CHECK(rereg_mr(app.mr, &stranger, -1) == static_cast<int>(Status::kNotFound));
  Mr forged = *app.mr;
  forged.lkey ^= 0x100;
  CHECK(rereg_mr(&forged, nullptr, IBV_ACCESS_LOCAL_WRITE) == static_cast<int>(Status::kNotFound));
  CHECK(rereg_mr(app.mr, nullptr, IBV_ACCESS_REMOTE_WRITE) == static_cast<int>(Status::kInvalidArgument));
}

TEST_CASE("rereg_mr's new access applies to remote accesses and to receives from then on") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 1) == 0);
  const uint64_t va = reinterpret_cast<uintptr_t>(app.buf);
  st.with([&](HostServer& s) {
    CHECK(s.translate_remote(app.qp->qp_num, app.mr->rkey, va, 64, IBV_ACCESS_REMOTE_WRITE) != nullptr);
  });
  REQUIRE(rereg_mr(app.mr, nullptr, IBV_ACCESS_REMOTE_READ) == 0);  // no local write, no remote write
  st.with([&](HostServer& s) {
    CHECK(s.translate_remote(app.qp->qp_num, app.mr->rkey, va, 64, IBV_ACCESS_REMOTE_WRITE) == nullptr);
    CHECK(s.translate_remote(app.qp->qp_num, app.mr->rkey, va, 64, IBV_ACCESS_REMOTE_READ) != nullptr);
  });
  ibv_sge sg = app.sge(0, 64);
  ibv_recv_wr rw{};
  rw.wr_id = 5;
  rw.sg_list = &sg;
  rw.num_sge = 1;
  ibv_recv_wr* bad;
  REQUIRE(post_recv(app.qp, &rw, &bad) == 0);
  RecvWork r[1];
  st.with([&](HostServer& s) {
    REQUIRE(s.fetch_recv(app.qp->qp_num, r) == 1);
    CHECK(r[0].invalid);  // fails when a message needs it
  });
}

TEST_CASE("resize_cq carries the unpolled completions over in order and refuses a ring they do not fit") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 1) == 0);
  REQUIRE(app.cq->cqe == 64);
  // Five sends done (posted, taken and completed as the worker does); one polled.
  for (uint64_t i = 0; i < 5; ++i) REQUIRE(post_one(app.qp, 100 + i, app.sge(0, 8)) == 0);
  SendWork w[8];
  st.with([&](HostServer& s) {
    REQUIRE(s.fetch_send(app.qp->qp_num, w) == 5);
    for (int i = 0; i < 5; ++i) CHECK(s.complete_send(app.qp->qp_num, w[i], IBV_WC_SUCCESS));
  });
  ibv_wc wc[8];
  REQUIRE(poll_cq(app.cq, 1, wc) == 1);  // 4 left
  CHECK(resize_cq(app.cq, 2) == static_cast<int>(Status::kInvalidArgument));  // 4 do not fit in 2
  CHECK(app.cq->cqe == 64);
  REQUIRE(resize_cq(app.cq, 5) == 0);
  CHECK(app.cq->cqe == 8);
  REQUIRE(post_one(app.qp, 105, app.sge(0, 8)) == 0);
  st.with([&](HostServer& s) {
    REQUIRE(s.fetch_send(app.qp->qp_num, w) == 1);
    CHECK(s.complete_send(app.qp->qp_num, w[0], IBV_WC_SUCCESS));
  });
  REQUIRE(app.poll(wc, 5) == 5);
  for (int i = 0; i < 5; ++i) CHECK(wc[i].wr_id == 101u + static_cast<unsigned>(i));
  // Sends already posted will complete here: a ring without room for them is refused too.
  for (uint64_t i = 0; i < 3; ++i) REQUIRE(post_one(app.qp, 200 + i, app.sge(0, 8)) == 0);
  CHECK(resize_cq(app.cq, 2) == static_cast<int>(Status::kInvalidArgument));
  REQUIRE(resize_cq(app.cq, 4) == 0);
  CHECK(resize_cq(app.cq, 0) == static_cast<int>(Status::kInvalidArgument));
}

TEST_CASE("a QP moved to RESET leaves its CQ: its completions are cleaned out, others' stay, late ones are not written") {
  ServerThread st;
  App app(st.path);
  QpInitAttr init;
  init.send_cq = app.cq;
  init.recv_cq = app.cq;
  init.cap.max_send_wr = 8;
  init.cap.max_recv_wr = 8;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  Qp* other = create_qp(app.pd, &init);
  REQUIRE(other != nullptr);
  REQUIRE(to_rts(app.qp, 1) == 0);
  REQUIRE(to_rts(other, 2) == 0);
  st.with([&](HostServer& s) {
    CHECK(s.complete_send(app.qp->qp_num, 1, IBV_WC_RDMA_WRITE, 0, true, IBV_WC_WR_FLUSH_ERR));
    CHECK(s.complete_send(other->qp_num, 2, IBV_WC_RDMA_WRITE, 0, true, IBV_WC_SUCCESS));
    CHECK(s.complete_recv(app.qp->qp_num, 3, IBV_WC_WR_FLUSH_ERR, 0, IBV_WC_RECV, false, 0, 0));
  });
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  REQUIRE(modify_qp(app.qp, &a, IBV_QP_STATE) == 0);
  st.with([&](HostServer& s) { s.complete_send(app.qp->qp_num, 4, IBV_WC_RDMA_WRITE, 0, true, IBV_WC_SUCCESS); });
  ibv_wc wc[4];
  REQUIRE(app.poll(wc, 1) == 1);
  CHECK(wc[0].wr_id == 2);
  CHECK(poll_cq(app.cq, 4, wc) == 0);
  REQUIRE(to_rts(app.qp, 1) == 0);  // used again
  REQUIRE(destroy_qp(other) == 0);
}
