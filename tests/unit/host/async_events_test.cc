// Asynchronous events through the host interface (protocol v2): the
// per-application ring the worker writes from its fast half, each kind of
// event, the bounded ring under a flood (nothing lost: kept on the objects,
// written as the application reads), the worker's death reported once, and
// completion timestamps beside a CQ's ring.
#include <catch2/catch.hpp>

#include <poll.h>

#include <set>
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

// The events waiting now (after the worker had `ms` to write them).
std::vector<AsyncEvent> take(Context* ctx, int ms = 200) {
  std::vector<AsyncEvent> out;
  pollfd p{async_event_fd(ctx), POLLIN, 0};
  poll(&p, 1, ms);
  AsyncEvent e;
  while (next_async_event(ctx, &e)) out.push_back(e);
  return out;
}

bool has(const std::vector<AsyncEvent>& v, ibv_event_type t, uint32_t element) {
  for (const AsyncEvent& e : v)
    if (e.type == static_cast<uint32_t>(t) && e.element == element) return true;
  return false;
}

// Objects a test makes beside its App's, destroyed before the App (declared after it) closes the
// device: QPs first, then the SRQs and CQs they use.
struct Owned {
  std::vector<Qp*> qps;
  std::vector<Srq*> srqs;
  std::vector<Cq*> cqs;
  Qp* qp(Qp* q) { if (q) qps.push_back(q); return q; }
  Srq* srq(Srq* s) { if (s) srqs.push_back(s); return s; }
  Cq* cq(Cq* c) { if (c) cqs.push_back(c); return c; }
  ~Owned() {
    for (Qp* q : qps) destroy_qp(q);
    for (Srq* s : srqs) destroy_srq(s);
    for (Cq* c : cqs) destroy_cq(c);
  }
};

Qp* qp_on(App& app, Srq* srq) {
  QpInitAttr init;
  init.send_cq = app.cq;
  init.recv_cq = app.cq;
  init.cap.max_send_wr = 8;
  init.cap.max_recv_wr = 8;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.srq = srq;
  return create_qp(app.pd, &init);
}

}  // namespace

TEST_CASE("a v2 application gets an event ring; nothing is waiting until the worker raises something") {
  ServerThread st;
  App app(st.path);
  CHECK(protocol_version(app.ctx) == 2);
  REQUIRE(async_event_fd(app.ctx) >= 0);
  CHECK(take(app.ctx, 50).empty());
  CHECK(port_active(app.ctx));
}

TEST_CASE("a QP the worker moves to ERR raises QP fatal; one the application moves does not") {
  ServerThread st;
  App app(st.path);
  Owned own;
  Qp* other = own.qp(qp_on(app, nullptr));
  REQUIRE(other != nullptr);
  REQUIRE(to_rts(app.qp, 0x100) == 0);
  REQUIRE(to_rts(other, 0x101) == 0);
  st.with([&](HostServer& s) { s.qp_error(app.qp->qp_num); });
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  REQUIRE(modify_qp(other, &a, IBV_QP_STATE) == 0);
  const auto ev = take(app.ctx);
  CHECK(ev.size() == 1);
  CHECK(has(ev, IBV_EVENT_QP_FATAL, app.qp->qp_num));
  st.with([&](HostServer& s) { s.qp_error(app.qp->qp_num); });  // already in ERR: nothing new
  CHECK(take(app.ctx, 50).empty());
}

TEST_CASE("a CQ overrun raises CQ error once, and QP fatal for the QP completing into it") {
  ServerThread st;
  App app(st.path);
  Owned own;
  Cq* small = own.cq(create_cq(app.ctx, 2));
  REQUIRE(small != nullptr);
  QpInitAttr init;
  init.send_cq = small;
  init.recv_cq = small;
  init.cap.max_send_wr = 8;
  init.cap.max_recv_wr = 8;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  Qp* qp = own.qp(create_qp(app.pd, &init));
  REQUIRE(qp != nullptr);
  REQUIRE(to_rts(qp, 0x100) == 0);
  st.with([&](HostServer& s) {
    for (int i = 0; i < 5; ++i) s.complete_send(qp->qp_num, i, IBV_WC_SEND, 0, true, IBV_WC_SUCCESS);
  });
  const auto ev = take(app.ctx);
  CHECK(has(ev, IBV_EVENT_CQ_ERR, small->handle));
  CHECK(has(ev, IBV_EVENT_QP_FATAL, qp->qp_num));
  CHECK(ev.size() == 2);
}

TEST_CASE("a QP of an SRQ entering ERR raises last WQE reached, whoever moved it") {
  ServerThread st;
  App app(st.path);
  Owned own;
  Srq* srq = own.srq(create_srq(app.pd, 16, 1));
  REQUIRE(srq != nullptr);
  Qp* q1 = own.qp(qp_on(app, srq));
  Qp* q2 = own.qp(qp_on(app, srq));
  REQUIRE(q1 != nullptr);
  REQUIRE(q2 != nullptr);
  REQUIRE(to_rts(q1, 0x100) == 0);
  REQUIRE(to_rts(q2, 0x101) == 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  REQUIRE(modify_qp(q1, &a, IBV_QP_STATE) == 0);
  st.with([&](HostServer& s) { s.qp_error(q2->qp_num); });
  const auto ev = take(app.ctx);
  CHECK(has(ev, IBV_EVENT_QP_LAST_WQE_REACHED, q1->qp_num));
  CHECK(has(ev, IBV_EVENT_QP_LAST_WQE_REACHED, q2->qp_num));
  CHECK(has(ev, IBV_EVENT_QP_FATAL, q2->qp_num));
  CHECK_FALSE(has(ev, IBV_EVENT_QP_FATAL, q1->qp_num));
}

TEST_CASE("an SRQ limit, armed at creation or by modify_srq, fires once when fewer WQEs are left") {
  ServerThread st;
  App app(st.path);
  Owned own;
  Srq* srq = own.srq(create_srq(app.pd, 16, 1, nullptr, 4));
  REQUIRE(srq != nullptr);
  CHECK(create_srq(app.pd, 16, 1, nullptr, 17) == nullptr);  // over max_wr
  st.with([&](HostServer& s) {
    CHECK(s.srq_limit(srq->handle) == 4);
    CHECK_FALSE(s.check_srq_limit(srq->handle, 4));  // not below
    CHECK(s.check_srq_limit(srq->handle, 3));
    CHECK(s.srq_limit(srq->handle) == 0);  // disarmed
    CHECK_FALSE(s.check_srq_limit(srq->handle, 0));
  });
  auto ev = take(app.ctx);
  CHECK(ev.size() == 1);
  CHECK(has(ev, IBV_EVENT_SRQ_LIMIT_REACHED, srq->handle));
  REQUIRE(modify_srq(srq, 8) == 0);
  CHECK(modify_srq(srq, 17) != 0);  // the limit cannot exceed the SRQ's depth
  st.with([&](HostServer& s) {
    CHECK(s.srq_limit(srq->handle) == 8);
    CHECK(s.check_srq_limit(srq->handle, 7));
  });
  ev = take(app.ctx);
  CHECK(has(ev, IBV_EVENT_SRQ_LIMIT_REACHED, srq->handle));
}

TEST_CASE("the port going down and up reaches every application and what query_port reads") {
  ServerThread st;
  App a(st.path), b(st.path);
  st.with([&](HostServer& s) { s.set_port_active(false); });
  for (App* app : {&a, &b}) {
    const auto ev = take(app->ctx);
    CHECK(ev.size() == 1);
    CHECK(has(ev, IBV_EVENT_PORT_ERR, 1));
    CHECK_FALSE(port_active(app->ctx));
  }
  st.with([&](HostServer& s) {
    s.set_port_active(false);  // no change, no event
    s.set_port_active(true);
  });
  for (App* app : {&a, &b}) {
    const auto ev = take(app->ctx);
    CHECK(ev.size() == 1);
    CHECK(has(ev, IBV_EVENT_PORT_ACTIVE, 1));
    CHECK(port_active(app->ctx));
  }
}

TEST_CASE("a flood of events never blocks the worker and loses none: the ring's overflow waits on its objects") {
  ServerThread st;
  App app(st.path);
  Owned own;
  std::vector<Qp*> qps;
  for (int i = 0; i < 300; ++i) {  // more fatal QPs than the ring holds (kAsyncEventDepth)
    Qp* q = own.qp(qp_on(app, nullptr));
    REQUIRE(q != nullptr);
    qps.push_back(q);
  }
  st.with([&](HostServer& s) {
    for (Qp* q : qps) s.qp_error(q->qp_num);  // returns at once whatever the ring holds
    s.set_port_active(false);
    s.set_port_active(true);  // the port's latest state only, once room is made
    CHECK(s.counters().async_events == kAsyncEventDepth);
    CHECK(s.counters().async_events_deferred == 300 - kAsyncEventDepth + 1);
  });
  std::set<uint32_t> fatal;
  int port_events = 0;
  for (int round = 0; round < 50 && (fatal.size() < qps.size() || port_events == 0); ++round) {
    for (const AsyncEvent& e : take(app.ctx, 20)) {
      if (e.type == IBV_EVENT_QP_FATAL) fatal.insert(e.element);
      if (e.type == IBV_EVENT_PORT_ACTIVE) ++port_events;
      CHECK(e.type != IBV_EVENT_PORT_ERR);  // superseded while it waited
    }
  }
  CHECK(fatal.size() == qps.size());
  CHECK(port_events == 1);
  CHECK(take(app.ctx, 50).empty());
}

TEST_CASE("an object destroyed with its event still pending takes the event with it") {
  ServerThread st;
  App app(st.path);
  Owned own;
  std::vector<Qp*> qps;
  for (uint32_t i = 0; i < kAsyncEventDepth + 2; ++i) qps.push_back(qp_on(app, nullptr));
  own.qps.assign(qps.begin(), qps.end() - 1);  // the last one is destroyed by the test
  st.with([&](HostServer& s) {
    for (Qp* q : qps) s.qp_error(q->qp_num);
  });
  const uint32_t last = qps.back()->qp_num;
  REQUIRE(destroy_qp(qps.back()) == 0);  // its QP fatal was still waiting for room
  std::set<uint32_t> fatal;
  for (int round = 0; round < 20; ++round)
    for (const AsyncEvent& e : take(app.ctx, 20)) fatal.insert(e.element);
  CHECK(fatal.size() == kAsyncEventDepth + 1);
  CHECK(fatal.count(last) == 0);
}

TEST_CASE("the worker's death is reported once, as device fatal") {
  ServerThread st;
  App app(st.path);
  st.stop();
  pollfd p{control_fd(app.ctx), POLLRDHUP, 0};
  CHECK(poll(&p, 1, 1000) == 1);
  AsyncEvent e{};
  REQUIRE(next_async_event(app.ctx, &e));
  CHECK(e.type == IBV_EVENT_DEVICE_FATAL);
  CHECK_FALSE(next_async_event(app.ctx, &e));
  CHECK_FALSE(port_active(app.ctx));
}

TEST_CASE("a CQ made with timestamps carries the worker's clock of each completion") {
  ServerThread st;
  App app(st.path);
  Owned own;
  Cq* cq = own.cq(create_cq(app.ctx, 8, nullptr, nullptr, true));
  REQUIRE(cq != nullptr);
  REQUIRE(cq->timestamps != nullptr);
  QpInitAttr init;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.cap.max_send_wr = 8;
  init.cap.max_recv_wr = 8;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  Qp* qp = own.qp(create_qp(app.pd, &init));
  REQUIRE(qp != nullptr);
  REQUIRE(to_rts(qp, 0x100) == 0);
  st.with([&](HostServer& s) { s.complete_send(qp->qp_num, 1, IBV_WC_SEND, 0, true, IBV_WC_SUCCESS); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // later polls: the clock moved on
  st.with([&](HostServer& s) { s.complete_send(qp->qp_num, 2, IBV_WC_SEND, 0, true, IBV_WC_SUCCESS); });
  ibv_wc wc[2];
  uint64_t ts[2] = {};
  REQUIRE(poll_cq(cq, 2, wc, ts) == 2);
  CHECK(ts[0] != 0);
  CHECK(ts[1] > ts[0]);
  // A CQ without them: the ring is what it was, and poll_cq gives 0.
  REQUIRE(to_rts(app.qp, 0x101) == 0);  // a QP in RESET completes nothing
  st.with([&](HostServer& s) { s.complete_send(app.qp->qp_num, 3, IBV_WC_SEND, 0, true, IBV_WC_SUCCESS); });
  REQUIRE(poll_cq(app.cq, 1, wc, ts) == 1);
  CHECK(ts[0] == 0);
}
