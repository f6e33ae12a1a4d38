#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <sys/epoll.h>

#include <cstring>
#include <vector>

#include "rnic/host/host_server.h"
#include "rnic/host/verbs.h"
#include "server_thread.h"
#include "verbs_helpers.h"

using namespace tandem::rnic::host;
using tandem::rnic::host::test::App;
using tandem::rnic::host::test::kAllAccess;
using tandem::rnic::host::test::ServerThread;
using tandem::rnic::host::test::to_rts;

TEST_CASE("modify_qp walks RESET-INIT-RTR-RTS and the worker sees the connect parameters") {
  ServerThread st;
  App app(st.path);
  CHECK(app.qp->state == IBV_QPS_RESET);
  REQUIRE(to_rts(app.qp, 0x1234) == 0);
  CHECK(app.qp->state == IBV_QPS_RTS);
  st.with([&](HostServer& s) {
    const QpInfo* q = s.qp_info(app.qp->qp_num);
    REQUIRE(q != nullptr);
    CHECK(q->state == IBV_QPS_RTS);
    CHECK(q->dest_qp_num == 0x1234);
    CHECK(q->rq_psn == 100);
    CHECK(q->sq_psn == 200);
    CHECK(q->path_mtu == IBV_MTU_4096);
    CHECK(q->dgid[12] == 10);
    CHECK(q->dgid[15] == 2);
    CHECK(q->timeout == 14);
    CHECK(q->qp_access_flags == static_cast<uint32_t>(kAllAccess));
    CHECK(q->app_id == app_id(app.ctx));
    HostEvent e;
    std::vector<ibv_qp_state> states;
    while (s.next_event(&e)) {
      if (e.kind == HostEventKind::kQpStateChanged && e.qpn == app.qp->qp_num) states.push_back(e.state);
    }
    CHECK(states == std::vector<ibv_qp_state>{IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS});
  });
}

TEST_CASE("invalid QP transitions and missing connect attributes are refused") {
  ServerThread st;
  App app(st.path);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  CHECK(modify_qp(app.qp, &a, IBV_QP_STATE) == static_cast<int>(Status::kBadState));
  a.qp_state = IBV_QPS_INIT;
  REQUIRE(modify_qp(app.qp, &a, IBV_QP_STATE) == 0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  CHECK(modify_qp(app.qp, &a, IBV_QP_STATE | IBV_QP_PATH_MTU) ==
        static_cast<int>(Status::kInvalidArgument));
  CHECK(app.qp->state == IBV_QPS_INIT);
}

TEST_CASE("posting before RTS is refused with bad state and nothing reaches the worker") {
  ServerThread st;
  App app(st.path);
  ibv_sge s = app.sge(0, 8);
  ibv_send_wr wr{};
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  CHECK(post_send(app.qp, &wr, &bad) == static_cast<int>(Status::kBadState));
  CHECK(bad == &wr);
  ibv_recv_wr rwr{};
  rwr.sg_list = &s;
  rwr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  CHECK(post_recv(app.qp, &rwr, &rbad) == static_cast<int>(Status::kBadState));
  CHECK(st.with([&](HostServer& sv) { return sv.send_queued(app.qp->qp_num); }) == 0);
}

TEST_CASE("posted WQEs reach the worker with SGEs translated to the same memory") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 77) == 0);
  for (std::size_t i = 0; i < App::kBufBytes; ++i) app.buf[i] = static_cast<uint8_t>(i * 7);

  ibv_sge w_sges[2] = {app.sge(100, 300), app.sge(8000, 50)};
  ibv_sge s_sge = app.sge(4096, 64);
  ibv_sge r_sge = app.sge(60000, 1000);
  ibv_send_wr wrs[3]{};
  wrs[0].wr_id = 1;
  wrs[0].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wrs[0].sg_list = w_sges;
  wrs[0].num_sge = 2;
  wrs[0].imm_data = htonl(0xabcdef01);
  wrs[0].wr.rdma.remote_addr = 0x7f0000001000;
  wrs[0].wr.rdma.rkey = 0x4242;
  wrs[0].next = &wrs[1];
  wrs[1].wr_id = 2;
  wrs[1].opcode = IBV_WR_SEND;
  wrs[1].sg_list = &s_sge;
  wrs[1].num_sge = 1;
  wrs[1].send_flags = IBV_SEND_SIGNALED;
  wrs[1].next = &wrs[2];
  wrs[2].wr_id = 3;
  wrs[2].opcode = IBV_WR_RDMA_READ;
  wrs[2].sg_list = &r_sge;
  wrs[2].num_sge = 1;
  wrs[2].send_flags = IBV_SEND_SIGNALED;
  wrs[2].wr.rdma.remote_addr = 0x1000;
  wrs[2].wr.rdma.rkey = 9;
  ibv_send_wr* bad = nullptr;
  REQUIRE(post_send(app.qp, wrs, &bad) == 0);

  std::vector<SendWork> work(8);
  st.with([&](HostServer& s) {
    uint32_t ready[8];
    REQUIRE(s.ready_qps(ready) == 1);
    CHECK(ready[0] == app.qp->qp_num);
    CHECK(s.ready_qps(ready) == 0);  // edge-triggered: taken once
    REQUIRE(s.fetch_send(app.qp->qp_num, work) == 3);
  });
  CHECK(work[0].wr_id == 1);
  CHECK(work[0].opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
  CHECK(ntohl(work[0].imm_data) == 0xabcdef01);
  CHECK(work[0].remote_addr == 0x7f0000001000);
  CHECK(work[0].rkey == 0x4242);
  CHECK(work[0].length == 350);
  REQUIRE(work[0].num_sge == 2);
  CHECK(work[0].sge[0].length == 300);
  CHECK(work[0].sge[1].length == 50);
  // The worker pointer is its own mapping, not the application's address...
  CHECK(work[0].sge[0].addr != app.buf + 100);
  // ...of the same bytes, both ways.
  CHECK(std::memcmp(work[0].sge[0].addr, app.buf + 100, 300) == 0);
  CHECK(std::memcmp(work[0].sge[1].addr, app.buf + 8000, 50) == 0);
  CHECK(work[0].sge[1].addr - work[0].sge[0].addr == 7900);
  std::memset(work[2].sge[0].addr, 0x5a, 1000);  // the "DMA" of an RDMA READ response
  CHECK(app.buf[60000] == 0x5a);
  CHECK(app.buf[60999] == 0x5a);
  CHECK(work[1].opcode == IBV_WR_SEND);
  CHECK(work[1].length == 64);
  CHECK(work[2].opcode == IBV_WR_RDMA_READ);

  st.with([&](HostServer& s) {
    for (int i = 0; i < 3; ++i) CHECK(s.complete_send(app.qp->qp_num, work[i], IBV_WC_SUCCESS));
  });
  ibv_wc wc[4];
  REQUIRE(app.poll(wc, 2) == 2);  // the unsignaled WRITE produced no completion
  CHECK(wc[0].wr_id == 2);
  CHECK(wc[0].status == IBV_WC_SUCCESS);
  CHECK(wc[0].opcode == IBV_WC_SEND);
  CHECK(wc[0].qp_num == app.qp->qp_num);
  CHECK(wc[1].wr_id == 3);
  CHECK(wc[1].opcode == IBV_WC_RDMA_READ);
  CHECK(wc[1].byte_len == 1000);
  CHECK(poll_cq(app.cq, 4, wc) == 0);
}

TEST_CASE("sq_sig_all makes every send WQE complete") {
  ServerThread st;
  App app(st.path, 16, 16, 1);
  REQUIRE(to_rts(app.qp, 1) == 0);
  ibv_sge s = app.sge(0, 16);
  ibv_send_wr wr{};
  wr.wr_id = 5;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &s;
  wr.num_sge = 1;
  ibv_send_wr* bad;
  REQUIRE(post_send(app.qp, &wr, &bad) == 0);
  SendWork w[1];
  st.with([&](HostServer& sv) {
    REQUIRE(sv.fetch_send(app.qp->qp_num, w) == 1);
    CHECK(sv.complete_send(app.qp->qp_num, w[0], IBV_WC_SUCCESS));
  });
  ibv_wc wc;
  REQUIRE(app.poll(&wc, 1) == 1);
  CHECK(wc.wr_id == 5);
  CHECK(wc.opcode == IBV_WC_RDMA_WRITE);
}

TEST_CASE("inline sends carry their payload in the WQE") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 1) == 0);
  char payload[] = "hello, worker";
  ibv_sge s{reinterpret_cast<uintptr_t>(payload), sizeof payload, 0};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_INLINE;
  ibv_send_wr* bad;
  REQUIRE(post_send(app.qp, &wr, &bad) == 0);
  std::memset(payload, 0, sizeof payload);  // inline: the buffer is free right after posting
  SendWork w[1];
  REQUIRE(st.with([&](HostServer& sv) { return sv.fetch_send(app.qp->qp_num, w); }) == 1);
  CHECK(w[0].inline_len == sizeof payload);
  CHECK(w[0].length == sizeof payload);
  CHECK(std::string(reinterpret_cast<char*>(w[0].inline_data)) == "hello, worker");
}

TEST_CASE("receive WQEs reach the worker and its completions carry immediate data") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 1) == 0);
  ibv_sge sges[2] = {app.sge(1024, 512), app.sge(2048, 512)};
  ibv_recv_wr wr{};
  wr.wr_id = 99;
  wr.sg_list = sges;
  wr.num_sge = 2;
  ibv_recv_wr* bad;
  REQUIRE(post_recv(app.qp, &wr, &bad) == 0);
  RecvWork r[2];
  st.with([&](HostServer& s) {
    REQUIRE(s.fetch_recv(app.qp->qp_num, r) == 1);
    CHECK(r[0].wr_id == 99);
    CHECK(r[0].length == 1024);
    REQUIRE(r[0].num_sge == 2);
    std::memcpy(r[0].sge[0].addr, "payload!", 8);  // the worker places an incoming SEND
    CHECK(s.complete_recv(app.qp->qp_num, r[0], IBV_WC_SUCCESS, 8, IBV_WC_RECV_RDMA_WITH_IMM,
                          true, htonl(0x11223344), 0x777));
  });
  CHECK(std::memcmp(app.buf + 1024, "payload!", 8) == 0);
  ibv_wc wc;
  REQUIRE(app.poll(&wc, 1) == 1);
  CHECK(wc.wr_id == 99);
  CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
  CHECK(wc.byte_len == 8);
  CHECK((wc.wc_flags & IBV_WC_WITH_IMM) != 0);
  CHECK(ntohl(wc.imm_data) == 0x11223344);
  CHECK(wc.src_qp == 0x777);
}

TEST_CASE("remote accesses are translated through the rkey and checked against bounds and rights") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 1) == 0);
  uint64_t va = reinterpret_cast<uintptr_t>(app.buf);
  Mr* ro = nullptr;
  auto* ro_buf = static_cast<uint8_t*>(alloc_buf(app.ctx, 4096));
  REQUIRE(ro_buf != nullptr);
  ro = reg_mr(app.pd, ro_buf, 4096, IBV_ACCESS_REMOTE_READ);
  REQUIRE(ro != nullptr);
  st.with([&](HostServer& s) {
    uint32_t q = app.qp->qp_num;
    uint8_t* p = s.translate_remote(q, app.mr->rkey, va + 5000, 100, IBV_ACCESS_REMOTE_WRITE);
    REQUIRE(p != nullptr);
    std::memcpy(p, "rdma-write", 10);
    CHECK(s.translate_remote(q, app.mr->rkey, va + App::kBufBytes - 10, 11, IBV_ACCESS_REMOTE_WRITE) ==
          nullptr);
    CHECK(s.translate_remote(q, app.mr->rkey, va - 1, 10, IBV_ACCESS_REMOTE_READ) == nullptr);
    CHECK(s.translate_remote(q, app.mr->rkey ^ 1, va, 10, IBV_ACCESS_REMOTE_READ) == nullptr);
    uint64_t rva = reinterpret_cast<uintptr_t>(ro_buf);
    CHECK(s.translate_remote(q, ro->rkey, rva, 10, IBV_ACCESS_REMOTE_READ) != nullptr);
    CHECK(s.translate_remote(q, ro->rkey, rva, 10, IBV_ACCESS_REMOTE_WRITE) == nullptr);
    CHECK(s.counters().bad_rkey == 4);
  });
  CHECK(std::memcmp(app.buf + 5000, "rdma-write", 10) == 0);
  dereg_mr(ro);
  free_buf(app.ctx, ro_buf);
}

TEST_CASE("a full send queue is reported with bad_wr at the first WR not posted") {
  ServerThread st;
  App app(st.path, 4, 4);
  REQUIRE(to_rts(app.qp, 1) == 0);
  CHECK(app.qp->cap.max_send_wr == 4);
  ibv_sge s = app.sge(0, 8);
  std::vector<ibv_send_wr> wrs(6);
  for (std::size_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = i;
    wrs[i].opcode = IBV_WR_SEND;
    wrs[i].sg_list = &s;
    wrs[i].num_sge = 1;
    wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  CHECK(post_send(app.qp, wrs.data(), &bad) == static_cast<int>(Status::kQueueFull));
  CHECK(bad == &wrs[4]);
  SendWork w[8];
  REQUIRE(st.with([&](HostServer& sv) { return sv.fetch_send(app.qp->qp_num, w); }) == 4);
  CHECK(w[3].wr_id == 3);
  // Taken but not finished, they still count (verbs: max_send_wr outstanding)...
  CHECK(post_send(app.qp, bad, &bad) == static_cast<int>(Status::kQueueFull));
  CHECK(bad == &wrs[4]);
  // ...finished (completed, signaled or not), the queue has room again.
  st.with([&](HostServer& sv) {
    for (int i = 0; i < 4; ++i) sv.complete_send(app.qp->qp_num, w[i], IBV_WC_SUCCESS);
  });
  CHECK(post_send(app.qp, bad, &bad) == 0);
  REQUIRE(st.with([&](HostServer& sv) { return sv.fetch_send(app.qp->qp_num, w); }) == 2);
  CHECK(w[0].wr_id == 4);
  CHECK(w[1].wr_id == 5);
}

TEST_CASE("a doorbell wakes a worker that went idle") {
  ServerThread st;
  App app(st.path);
  REQUIRE(to_rts(app.qp, 1) == 0);
  st.with([&](HostServer& s) {
    uint32_t ready[4];
    s.ready_qps(ready);
    REQUIRE(s.begin_idle());
    epoll_event ev;
    CHECK(epoll_wait(s.wait_fd(), &ev, 1, 0) == 0);  // nothing to do: the worker would sleep
    ibv_sge sg = app.sge(0, 8);
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    ibv_send_wr* bad;
    REQUIRE(post_send(app.qp, &wr, &bad) == 0);
    CHECK(epoll_wait(s.wait_fd(), &ev, 1, 1000) == 1);  // the eventfd kicked it
    s.end_idle();
    CHECK(s.ready_qps(ready) == 1);
    // A pending doorbell keeps the worker from going idle.
    REQUIRE(post_send(app.qp, &wr, &bad) == 0);
    CHECK_FALSE(s.begin_idle());
  });
}

TEST_CASE("huge pages are tried for buffers and the worker agrees on what was obtained") {
  ServerThread st;
  App app(st.path);
  bool huge = buf_is_hugetlb(app.ctx, app.buf);
  CHECK(app.mr->hugetlb == huge);
  bool seen = st.with([&](HostServer& s) {
    HostEvent e;
    while (s.next_event(&e)) {
      if (e.kind == HostEventKind::kMrRegistered && e.lkey == app.mr->lkey) return e.hugetlb == huge;
    }
    return false;
  });
  CHECK(seen);
  WARN("alloc_buf on huge pages: " << (huge ? "yes" : "no (fell back to plain memfd)"));
}

TEST_CASE("an armed CQ wakes its completion channel once, an unarmed one does not") {
  ServerThread st;
  App app(st.path);
  CompChannel* ch = create_comp_channel(app.ctx);
  REQUIRE(ch != nullptr);
  int tag = 0;
  Cq* cq = create_cq(app.ctx, 16, &tag, ch);
  REQUIRE(cq != nullptr);
  QpInitAttr init;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.cap.max_send_wr = 8;
  init.cap.max_recv_wr = 8;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  Qp* qp = create_qp(app.pd, &init);
  REQUIRE(qp != nullptr);
  REQUIRE(to_rts(qp, 1) == 0);
  ibv_sge s = app.sge(0, 8);
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad;
  auto complete_one = [&](uint64_t id) {
    wr.wr_id = id;
    REQUIRE(post_send(qp, &wr, &bad) == 0);
    SendWork w[1];
    st.with([&](HostServer& sv) {
      REQUIRE(sv.fetch_send(qp->qp_num, w) == 1);
      REQUIRE(sv.complete_send(qp->qp_num, w[0], IBV_WC_SUCCESS));
    });
  };
  Cq* got = nullptr;
  void* ctx = nullptr;

  complete_one(1);  // not armed: no event
  CHECK(get_cq_event(ch, &got, &ctx, 0) == static_cast<int>(Status::kTimeout));

  REQUIRE(req_notify_cq(cq, 0) == 0);
  complete_one(2);
  REQUIRE(get_cq_event(ch, &got, &ctx, 1000) == 0);
  CHECK(got == cq);
  CHECK(ctx == &tag);
  ack_cq_events(got, 1);
  complete_one(3);  // one event per arm
  CHECK(get_cq_event(ch, &got, &ctx, 0) == static_cast<int>(Status::kTimeout));
  ibv_wc wc[4];
  int n = 0;
  for (int i = 0; i < 1000 && n < 3; ++i) n += poll_cq(cq, 4 - n, wc + n);
  REQUIRE(n == 3);
  CHECK(wc[1].wr_id == 2);
  CHECK(st.with([](HostServer& sv) { return sv.counters().cq_events; }) == 1);

  CHECK(destroy_comp_channel(ch) == static_cast<int>(Status::kBusy));
  REQUIRE(destroy_qp(qp) == 0);
  REQUIRE(destroy_cq(cq) == 0);
  CHECK(destroy_comp_channel(ch) == 0);
}
