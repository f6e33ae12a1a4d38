// Shared receive queues through the host interface: the application's SRQ
// ring, its doorbell (reported by ready_qps as kSrqDoorbell | handle), WQEs
// checked against the SRQ's PD, QPs created on it, and its lifetime
// (EBUSY while QPs use it, freed with a dead application).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

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

Qp* qp_on(App& app, Srq* srq) {
  QpInitAttr init;
  init.send_cq = app.cq;
  init.recv_cq = app.cq;
  init.cap.max_send_wr = 8;
  init.cap.max_recv_wr = 64;  // ignored with an SRQ
  init.cap.max_send_sge = 1;
  init.srq = srq;
  Qp* qp = create_qp(app.pd, &init);
  if (qp != nullptr) CHECK(init.cap.max_recv_wr == 0);
  return qp;
}

std::vector<HostEvent> events(HostServer& s) {
  std::vector<HostEvent> out;
  HostEvent e;
  while (s.next_event(&e)) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("SRQ WQEs reach the worker translated; any QP on the SRQ completes them on its own CQ") {
  ServerThread st;
  App app(st.path);
  Srq* srq = create_srq(app.pd, 5, 2);
  REQUIRE(srq != nullptr);
  CHECK(srq->max_wr == 8);
  Qp* q1 = qp_on(app, srq);
  Qp* q2 = qp_on(app, srq);
  REQUIRE(q1 != nullptr);
  REQUIRE(q2 != nullptr);
  REQUIRE(to_rts(q1, 0x100) == 0);
  REQUIRE(to_rts(q2, 0x101) == 0);  // a QP in RESET completes nothing
  st.with([&](HostServer& s) {
    CHECK(s.srq_count() == 1);
    CHECK(s.qp_info(q1->qp_num)->srq == srq->handle);
    bool created = false;
    for (const HostEvent& e : events(s))
      if (e.kind == HostEventKind::kSrqCreated && e.srq == srq->handle) created = e.srq_depth == 8;
    CHECK(created);
  });

  ibv_sge sg[2] = {app.sge(0, 100), app.sge(1000, 200)};
  ibv_recv_wr wr[3]{};
  for (int i = 0; i < 3; ++i) {
    wr[i].wr_id = 50 + i;
    wr[i].sg_list = sg;
    wr[i].num_sge = i == 0 ? 2 : 1;
    wr[i].next = i < 2 ? &wr[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  REQUIRE(post_srq_recv(srq, wr, &bad) == 0);

  // A QP on an SRQ has no receive queue of its own.
  wr[0].next = nullptr;
  CHECK(post_recv(q1, wr, &bad) == static_cast<int>(Status::kInvalidArgument));
  // An lkey the application does not have: refused at post, no QP to fail later.
  ibv_sge stale = sg[0];
  stale.lkey ^= 0x100;
  ibv_recv_wr sw{};
  sw.sg_list = &stale;
  sw.num_sge = 1;
  CHECK(post_srq_recv(srq, &sw, &bad) == static_cast<int>(Status::kBadLkey));
  CHECK(bad == &sw);

  std::vector<RecvWork> got(8);
  st.with([&](HostServer& s) {
    uint32_t ready[8];
    const std::size_t n = s.ready_qps(ready);
    REQUIRE(n == 1);
    CHECK(ready[0] == (kSrqDoorbell | srq->handle));
    CHECK(s.srq_queued(srq->handle) == 3);
    REQUIRE(s.fetch_srq_recv(ready[0], std::span(got.data(), 2)) == 2);
    REQUIRE(s.fetch_srq_recv(srq->handle, std::span(got.data() + 2, 6)) == 1);
    CHECK(s.srq_queued(srq->handle) == 0);
    CHECK(got[0].wr_id == 50);
    CHECK(got[0].num_sge == 2);
    CHECK(got[0].length == 300);
    CHECK(got[2].wr_id == 52);
    // The transport chose q2 for the first message and q1 for the second.
    CHECK(s.complete_recv(q2->qp_num, got[0], IBV_WC_SUCCESS, 77, IBV_WC_RECV, false, 0, 9));
    CHECK(s.complete_recv(q1->qp_num, got[1], IBV_WC_SUCCESS, 5, IBV_WC_RECV, false, 0, 9));
    CHECK(s.counters().srq_wqes == 3);
  });
  app.buf[0] = 0x5a;
  CHECK(got[0].sge[0].addr[0] == 0x5a);
  ibv_wc wc[2];
  REQUIRE(app.poll(wc, 2) == 2);
  CHECK(wc[0].wr_id == 50);
  CHECK(wc[0].qp_num == q2->qp_num);
  CHECK(wc[0].byte_len == 77);
  CHECK(wc[1].wr_id == 51);
  CHECK(wc[1].qp_num == q1->qp_num);

  // Verbs: EBUSY while QPs use it.
  CHECK(destroy_srq(srq) == static_cast<int>(Status::kBusy));
  REQUIRE(destroy_qp(q1) == 0);
  REQUIRE(destroy_qp(q2) == 0);
  const uint32_t handle = srq->handle;
  REQUIRE(destroy_srq(srq) == 0);
  st.with([&](HostServer& s) {
    CHECK(s.srq_count() == 0);
    bool destroyed = false;
    for (const HostEvent& e : events(s))
      if (e.kind == HostEventKind::kSrqDestroyed && e.srq == handle) destroyed = true;
    CHECK(destroyed);
    RecvWork w[1];
    CHECK(s.fetch_srq_recv(handle, w) == 0);  // a stale handle finds nothing
  });
}

TEST_CASE("an SRQ ring holds max_wr WQEs; the worker skips a forged one and counts it") {
  ServerThread st;
  App app(st.path);
  Srq* srq = create_srq(app.pd, 4, 1);
  REQUIRE(srq != nullptr);
  ibv_sge sg = app.sge(0, 64);
  ibv_recv_wr wr{};
  wr.sg_list = &sg;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  for (int i = 0; i < 4; ++i) REQUIRE(post_srq_recv(srq, &wr, &bad) == 0);
  CHECK(post_srq_recv(srq, &wr, &bad) == static_cast<int>(Status::kQueueFull));
  // A hostile application writes an SGE outside its MR straight into the ring.
  st.with([&](HostServer& s) {
    RecvWork w[2];
    CHECK(s.fetch_srq_recv(srq->handle, std::span(w, 2)) == 2);
  });
  RecvWqe* forged = srq->ring.claim();
  REQUIRE(forged != nullptr);
  forged->wr_id = 99;
  forged->num_sge = 1;
  forged->sge[0] = WqeSge{App::kBufBytes - 8, 64, app.mr->lkey};
  srq->ring.publish();
  st.with([&](HostServer& s) {
    RecvWork w[4];
    CHECK(s.fetch_srq_recv(srq->handle, std::span(w, 4)) == 2);  // the two good ones
    CHECK(s.srq_queued(srq->handle) == 0);
    CHECK(s.counters().srq_wqes_dropped == 1);
    CHECK(s.counters().sge_out_of_bounds == 1);
  });
  CHECK(destroy_srq(srq) == 0);
}

TEST_CASE("an SRQ of another PD's QP is fine, of another application is not found, and dies with its application") {
  ServerThread st;
  App a(st.path), b(st.path);
  Srq* srq = create_srq(a.pd, 16, 1);
  REQUIRE(srq != nullptr);
  // b names a's SRQ handle in its own create_qp request: the worker refuses it.
  Srq forged_srq_of_a{};
  forged_srq_of_a.context = b.ctx;
  forged_srq_of_a.handle = srq->handle;
  QpInitAttr init;
  init.send_cq = b.cq;
  init.recv_cq = b.cq;
  init.cap.max_send_wr = 4;
  init.srq = &forged_srq_of_a;
  CHECK(create_qp(b.pd, &init) == nullptr);
  CHECK(last_status() == Status::kNotFound);
  // A create_qp with the SRQ of another context is refused before it is sent.
  init.srq = srq;
  CHECK(create_qp(b.pd, &init) == nullptr);
  CHECK(last_status() == Status::kInvalidArgument);
  Qp* qp = qp_on(a, srq);
  REQUIRE(qp != nullptr);
  // a "dies": closing its socket frees the QP, then the SRQ.
  struct { Qp* qp; Cq* cq; Mr* mr; Pd* pd; } a_objects{a.qp, a.cq, a.mr, a.pd};
  close_device(a.ctx);
  a.ctx = nullptr;
  a.qp = nullptr;
  a.cq = nullptr;
  a.mr = nullptr;
  a.buf = nullptr;
  a.pd = nullptr;
  REQUIRE(st.wait_for([](HostServer& s) { return s.srq_count() == 0; }));
  st.with([&](HostServer& s) {
    int qp_gone_at = -1, srq_gone_at = -1, i = 0;
    for (const HostEvent& e : events(s)) {
      if (e.kind == HostEventKind::kQpDestroyed && e.qpn == qp->qp_num) qp_gone_at = i;
      if (e.kind == HostEventKind::kSrqDestroyed && e.srq == srq->handle) srq_gone_at = i;
      ++i;
    }
    CHECK(qp_gone_at >= 0);
    CHECK(srq_gone_at > qp_gone_at);  // the worker destroys the QPs on it first
  });
  // This "dead" application's process lives on: free what close_device leaves
  // (a really dead one's memory goes with it), so LeakSanitizer sees no leak.
  delete qp;
  delete srq;
  delete a_objects.qp;
  delete a_objects.cq;
  delete a_objects.mr;
  delete a_objects.pd;
}
