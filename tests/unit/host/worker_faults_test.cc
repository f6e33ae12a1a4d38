// What an application sees when the worker fails it: the worker dying under
// posted work (the WQEs it had not finished come back as
// IBV_WC_WR_FLUSH_ERR, then poll_cq fails) and a CQ overrun (the CQ is in
// error once drained, the QP that completed into it in ERR).
#include <catch2/catch.hpp>

#include <vector>

#include "rnic/host/host_server.h"
#include "rnic/host/verbs.h"
#include "server_thread.h"
#include "verbs_helpers.h"

using namespace tandem::rnic::host;
using tandem::rnic::host::test::App;
using tandem::rnic::host::test::ServerThread;
using tandem::rnic::host::test::to_rts;

namespace {

int post_writes(App& app, uint64_t first_id, int n, bool signaled) {
  for (int i = 0; i < n; ++i) {
    ibv_sge s = app.sge(0, 64);
    ibv_send_wr wr{};
    wr.wr_id = first_id + static_cast<uint64_t>(i);
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = 0x1000;
    wr.wr.rdma.rkey = 1;
    ibv_send_wr* bad = nullptr;
    if (int rc = post_send(app.qp, &wr, &bad)) return rc;
  }
  return 0;
}

}  // namespace

TEST_CASE("the worker dies: finished completions, then FLUSH_ERR for every unfinished WQE, then an error") {
  ServerThread st;
  App app(st.path, 16, 16);
  REQUIRE(to_rts(app.qp, 0x100) == 0);
  ibv_sge rs = app.sge(4096, 64);
  ibv_recv_wr rwr{};
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  for (uint64_t id = 100; id < 102; ++id) {
    rwr.wr_id = id;
    REQUIRE(post_recv(app.qp, &rwr, &rbad) == 0);
  }
  REQUIRE(post_writes(app, 1, 2, false) == 0);  // unsignaled: finished without a CQE
  REQUIRE(post_writes(app, 3, 3, true) == 0);
  st.with([&](HostServer& s) {
    SendWork w[8];
    REQUIRE(s.fetch_send(app.qp->qp_num, w) == 5);
    // The transport finished 1..3 (only 3 is signaled); 4 and 5 were on the wire.
    for (int i = 0; i < 3; ++i) REQUIRE(s.complete_send(app.qp->qp_num, w[i], IBV_WC_SUCCESS));
  });
  REQUIRE(post_writes(app, 6, 1, true) == 0);  // never fetched
  st.stop();                                   // the worker dies

  std::vector<ibv_wc> got;
  ibv_wc wc[4];
  int r = 0;
  for (int i = 0; i < 100000 && (r = poll_cq(app.cq, 4, wc)) >= 0; ++i) got.insert(got.end(), wc, wc + r);
  CHECK(r == -static_cast<int>(Status::kWorkerGone));
  REQUIRE(got.size() == 1 + 3 + 2);
  CHECK(got[0].wr_id == 3);
  CHECK(got[0].status == IBV_WC_SUCCESS);
  const uint64_t flushed[] = {4, 5, 6, 100, 101};
  for (int i = 0; i < 5; ++i) {
    CHECK(got[1 + i].wr_id == flushed[i]);
    CHECK(got[1 + i].status == IBV_WC_WR_FLUSH_ERR);
    CHECK(got[1 + i].qp_num == app.qp->qp_num);
    CHECK(got[1 + i].opcode == (i < 3 ? IBV_WC_RDMA_WRITE : IBV_WC_RECV));
  }
  CHECK(poll_cq(app.cq, 4, wc) == -static_cast<int>(Status::kWorkerGone));  // and stays so
  CHECK(app.qp->state == IBV_QPS_ERR);
}

TEST_CASE("a CQ overrun: the CQ is in error once drained, the QP in ERR, a new CQ in its slot is fine") {
  ServerThread st;
  App app(st.path, 16, 16);
  Cq* small = create_cq(app.ctx, 4);
  REQUIRE(small != nullptr);
  QpInitAttr init;
  init.send_cq = small;
  init.recv_cq = app.cq;
  init.cap.max_send_wr = 16;
  init.cap.max_send_sge = 1;
  Qp* qp = create_qp(app.pd, &init);
  REQUIRE(qp != nullptr);
  REQUIRE(to_rts(qp, 0x100) == 0);
  std::swap(app.qp, qp);
  REQUIRE(post_writes(app, 1, 6, true) == 0);
  st.with([&](HostServer& s) {
    SendWork w[8];
    REQUIRE(s.fetch_send(app.qp->qp_num, w) == 6);
    for (int i = 0; i < 4; ++i) CHECK(s.complete_send(app.qp->qp_num, w[i], IBV_WC_SUCCESS));
    CHECK_FALSE(s.complete_send(app.qp->qp_num, w[4], IBV_WC_SUCCESS));  // the fifth: overrun
    CHECK_FALSE(s.complete_send(app.qp->qp_num, w[5], IBV_WC_WR_FLUSH_ERR));  // in error: nothing more
    CHECK(s.counters().cq_overruns == 1);
  });
  ibv_wc wc[8];
  CHECK(poll_cq(small, 8, wc) == 4);
  CHECK(poll_cq(small, 8, wc) == -static_cast<int>(Status::kCqOverrun));
  REQUIRE(query_qp_state(app.qp) == 0);
  CHECK(app.qp->state == IBV_QPS_ERR);
  std::swap(app.qp, qp);
  REQUIRE(destroy_qp(qp) == 0);
  REQUIRE(destroy_cq(small) == 0);
  // A CQ created in the freed slot starts clean.
  Cq* again = create_cq(app.ctx, 4);
  REQUIRE(again != nullptr);
  init.send_cq = again;
  qp = create_qp(app.pd, &init);
  REQUIRE(qp != nullptr);
  REQUIRE(to_rts(qp, 0x100) == 0);
  std::swap(app.qp, qp);
  REQUIRE(post_writes(app, 9, 1, true) == 0);
  st.with([&](HostServer& s) {
    SendWork w[2];
    REQUIRE(s.fetch_send(app.qp->qp_num, w) == 1);
    CHECK(s.complete_send(app.qp->qp_num, w[0], IBV_WC_SUCCESS));
  });
  CHECK(poll_cq(again, 8, wc) == 1);
  std::swap(app.qp, qp);
  destroy_qp(qp);
  destroy_cq(again);
}
