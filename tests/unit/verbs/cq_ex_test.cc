// The extended CQ (ibv_create_cq_ex, ibv_start_poll/next_poll/end_poll,
// ibv_wc_read_*), ibv_query_device_ex, ibv_query_rt_values_ex and the
// asynchronous events (ibv_get_async_event / ibv_ack_async_event) of the
// drop-in libibverbs, against a HostServer in this process standing in for
// the worker.
#include <catch2/catch.hpp>
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/mman.h>
#include <x86intrin.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "one_device.h"
namespace th = tandem::rnic::host;

namespace {

struct Lab {
  Lab() {
    config.vnic_ips = {0xC0A80801};
    st = std::make_unique<th::test::ServerThread>(config);
    dev = std::make_unique<th::test::OneDevice>(*st, "tandem_X_v1", 0xC0A80801);
    ctx = dev->ctx;
    pd = ibv_alloc_pd(ctx);
    REQUIRE(pd != nullptr);
  }
  ~Lab() { ibv_dealloc_pd(pd); }
  ibv_qp* qp_on(ibv_cq* cq, ibv_srq* srq = nullptr) {
    ibv_qp_init_attr a{};
    a.send_cq = cq;
    a.recv_cq = cq;
    a.srq = srq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 8;
    a.cap.max_recv_wr = 8;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    return ibv_create_qp(pd, &a);
  }
  th::ServerConfig config;
  std::unique_ptr<th::test::ServerThread> st;
  std::unique_ptr<th::test::OneDevice> dev;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
};

constexpr uint64_t kAllFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                               IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                               IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;

}  // namespace

TEST_CASE("ibv_create_cq_ex with the common wc_flags: each completion read field by field, timestamped") {
  Lab lab;
  ibv_cq_init_attr_ex a{};
  a.cqe = 16;
  a.wc_flags = kAllFlags;
  ibv_cq_ex* cq = ibv_create_cq_ex(lab.ctx, &a);
  REQUIRE(cq != nullptr);
  CHECK(cq->cqe >= 16);
  ibv_cq* plain = ibv_cq_ex_to_cq(cq);
  ibv_qp* qp = lab.qp_on(plain);
  REQUIRE(qp != nullptr);
  ibv_qp_attr init{};  // a QP in RESET completes nothing
  init.qp_state = IBV_QPS_INIT;
  init.port_num = 1;
  REQUIRE(ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  ibv_poll_cq_attr pa{};
  CHECK(ibv_start_poll(cq, &pa) == ENOENT);  // empty: no end_poll owed

  lab.st->with([&](th::HostServer& s) {
    CHECK(s.complete_recv(qp->qp_num, 11, IBV_WC_SUCCESS, 123, IBV_WC_RECV, true, htonl(0xfeed), 0x777, false));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the server's clock moves on
  lab.st->with([&](th::HostServer& s) {
    CHECK(s.complete_send(qp->qp_num, 12, IBV_WC_RDMA_READ, 4096, true, IBV_WC_SUCCESS));
  });
  int rc = ENOENT;
  for (int i = 0; i < 1000 && rc == ENOENT; ++i) rc = ibv_start_poll(cq, &pa);
  REQUIRE(rc == 0);
  CHECK(cq->status == IBV_WC_SUCCESS);
  CHECK(cq->wr_id == 11);
  CHECK(ibv_wc_read_opcode(cq) == IBV_WC_RECV);
  CHECK(ibv_wc_read_byte_len(cq) == 123);
  CHECK(ntohl(ibv_wc_read_imm_data(cq)) == 0xfeed);
  CHECK((ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM) != 0);
  CHECK(ibv_wc_read_qp_num(cq) == qp->qp_num);
  CHECK(ibv_wc_read_src_qp(cq) == 0x777);
  CHECK(ibv_wc_read_slid(cq) == 0);
  CHECK(ibv_wc_read_dlid_path_bits(cq) == 0);
  const uint64_t t1 = ibv_wc_read_completion_ts(cq);
  rc = ENOENT;
  for (int i = 0; i < 1000 && rc == ENOENT; ++i) rc = ibv_next_poll(cq);
  REQUIRE(rc == 0);
  CHECK(cq->wr_id == 12);
  CHECK(ibv_wc_read_opcode(cq) == IBV_WC_RDMA_READ);
  CHECK(ibv_wc_read_byte_len(cq) == 4096);
  const uint64_t t2 = ibv_wc_read_completion_ts(cq);
  CHECK(t1 != 0);
  CHECK(t2 > t1);  // the worker's clock (ns) when it wrote each
  CHECK(ibv_next_poll(cq) == ENOENT);
  ibv_end_poll(cq);

  // The same CQ through ibv_poll_cq (ibv_cq_ex_to_cq), and ibv_req_notify_cq.
  lab.st->with([&](th::HostServer& s) { s.complete_send(qp->qp_num, 13, IBV_WC_SEND, 0, true, IBV_WC_SUCCESS); });
  ibv_wc wc{};
  int got = 0;
  for (int i = 0; i < 1000 && got == 0; ++i) got = ibv_poll_cq(plain, 1, &wc);
  CHECK(got == 1);
  CHECK(wc.wr_id == 13);
  CHECK(ibv_destroy_qp(qp) == 0);
  CHECK(ibv_destroy_cq(plain) == 0);
}

TEST_CASE("ibv_create_cq_ex refuses what it cannot report, and bad sizes and vectors, as verbs says") {
  Lab lab;
  ibv_device_attr da{};
  REQUIRE(ibv_query_device(lab.ctx, &da) == 0);
  ibv_cq_init_attr_ex a{};
  a.cqe = 8;
  for (uint64_t f : {uint64_t{IBV_WC_EX_WITH_CVLAN}, uint64_t{IBV_WC_EX_WITH_FLOW_TAG},
                     uint64_t{IBV_WC_EX_WITH_TM_INFO}, uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK}}) {
    a.wc_flags = f;
    errno = 0;
    CHECK(ibv_create_cq_ex(lab.ctx, &a) == nullptr);
    CHECK(errno == EOPNOTSUPP);
  }
  a.wc_flags = 0;
  a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  a.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  errno = 0;
  CHECK(ibv_create_cq_ex(lab.ctx, &a) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;  // a hint: fine
  ibv_cq_ex* ok = ibv_create_cq_ex(lab.ctx, &a);
  REQUIRE(ok != nullptr);
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(ok)) == 0);
  a.comp_mask = 0;
  a.cqe = static_cast<uint32_t>(da.max_cqe) + 1;
  errno = 0;
  CHECK(ibv_create_cq_ex(lab.ctx, &a) == nullptr);
  CHECK(errno == EINVAL);
  a.cqe = 8;
  a.comp_vector = static_cast<uint32_t>(lab.ctx->num_comp_vectors);
  errno = 0;
  CHECK(ibv_create_cq_ex(lab.ctx, &a) == nullptr);
  CHECK(errno == EINVAL);
  errno = 0;
  CHECK(ibv_create_cq(lab.ctx, 8, nullptr, nullptr, lab.ctx->num_comp_vectors) == nullptr);
  CHECK(errno == EINVAL);
}

TEST_CASE("ibv_query_device_ex: the legacy attributes, one port, the completion clock; atomics HCA") {
  Lab lab;
  ibv_device_attr_ex ex{};
  REQUIRE(ibv_query_device_ex(lab.ctx, nullptr, &ex) == 0);
  ibv_device_attr legacy{};
  REQUIRE(ibv_query_device(lab.ctx, &legacy) == 0);
  CHECK(std::memcmp(&ex.orig_attr, &legacy, sizeof legacy) == 0);
  CHECK(ex.orig_attr.atomic_cap == IBV_ATOMIC_HCA);
  CHECK(ex.orig_attr.vendor_id != 0);
  CHECK(ex.phys_port_cnt_ex == 1);
  CHECK(ex.hca_core_clock == 1'000'000);  // kHz: timestamps count ns
  CHECK(ex.completion_timestamp_mask == ~uint64_t{0});
  CHECK(ex.odp_caps.general_caps == 0);
  ibv_query_device_ex_input in{};
  in.comp_mask = 1;
  CHECK(ibv_query_device_ex(lab.ctx, &in, &ex) == EINVAL);

  // The worker's clock, where it published one (the DPDK worker's TSC clock).
  ibv_values_ex v{};
  v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  CHECK(ibv_query_rt_values_ex(lab.ctx, &v) == EOPNOTSUPP);
  const uint64_t base = __rdtsc();
  lab.st->with([&](th::HostServer& s) { s.publish_clock(base, uint64_t{1} << 32); });  // 1 ns per tick
  REQUIRE(ibv_query_rt_values_ex(lab.ctx, &v) == 0);
  CHECK(v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK);
  const uint64_t ns = uint64_t(v.raw_clock.tv_sec) * 1'000'000'000 + uint64_t(v.raw_clock.tv_nsec);
  CHECK(ns <= __rdtsc() - base);
}

TEST_CASE("ibv_get_async_event names the application's objects; a destroy waits for the event's ack") {
  Lab lab;
  ibv_cq* cq = ibv_create_cq(lab.ctx, 4, nullptr, nullptr, 0);
  REQUIRE(cq != nullptr);
  ibv_qp* qp = lab.qp_on(cq);
  REQUIRE(qp != nullptr);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  sa.attr.srq_limit = 8;  // not below max_wr... as verbs: EINVAL only above
  ibv_srq* srq = ibv_create_srq(lab.pd, &sa);
  REQUIRE(srq != nullptr);
  ibv_srq_attr q{};
  REQUIRE(ibv_query_srq(srq, &q) == 0);
  CHECK(q.srq_limit == 8);
  q.srq_limit = 2;
  REQUIRE(ibv_modify_srq(srq, &q, IBV_SRQ_LIMIT) == 0);
  REQUIRE(ibv_query_srq(srq, &q) == 0);
  CHECK(q.srq_limit == 2);

  lab.st->with([&](th::HostServer& s) {
    s.qp_error(qp->qp_num);
    s.check_srq_limit(srq->handle, 1);
    s.set_port_active(false);
  });
  pollfd p{lab.ctx->async_fd, POLLIN, 0};
  REQUIRE(poll(&p, 1, 2000) == 1);
  std::vector<ibv_async_event> got;
  REQUIRE(fcntl(lab.ctx->async_fd, F_SETFL, fcntl(lab.ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0);
  for (int i = 0; i < 100 && got.size() < 3; ++i) {
    ibv_async_event ev;
    if (ibv_get_async_event(lab.ctx, &ev) == 0) got.push_back(ev);
    else std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(got.size() == 3);
  CHECK(got[0].event_type == IBV_EVENT_QP_FATAL);
  CHECK(got[0].element.qp == qp);
  CHECK(got[1].event_type == IBV_EVENT_SRQ_LIMIT_REACHED);
  CHECK(got[1].element.srq == srq);
  CHECK(got[2].event_type == IBV_EVENT_PORT_ERR);
  CHECK(got[2].element.port_num == 1);
  REQUIRE(ibv_query_srq(srq, &q) == 0);
  CHECK(q.srq_limit == 0);  // fired: disarmed
  ibv_port_attr port{};
  REQUIRE(ibv_query_port(lab.ctx, 1, &port) == 0);
  CHECK(port.state == IBV_PORT_DOWN);
  ibv_async_event ev;
  CHECK(ibv_get_async_event(lab.ctx, &ev) == -1);
  CHECK(errno == EAGAIN);

  // ibv_destroy_qp waits for the QP's event to be acknowledged (rdma-core's rule).
  std::atomic<bool> destroyed{false};
  std::thread t([&] {
    CHECK(ibv_destroy_qp(qp) == 0);
    destroyed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(destroyed);
  for (ibv_async_event& e : got) ibv_ack_async_event(&e);
  t.join();
  CHECK(destroyed);
  CHECK(ibv_destroy_srq(srq) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
}
