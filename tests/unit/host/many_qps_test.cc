#include <catch2/catch.hpp>

#include <cstdio>
#include <vector>

#include "rnic/host/host_server.h"
#include "rnic/host/verbs.h"
#include "server_thread.h"

using namespace tandem::rnic::host;

namespace {

std::vector<Qp*> create_many(Pd* pd, Cq* cq, int n) {
  std::vector<Qp*> qps;
  qps.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    QpInitAttr init;
    init.send_cq = cq;
    init.recv_cq = cq;
    init.cap.max_send_wr = 16;
    init.cap.max_recv_wr = 16;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    Qp* qp = create_qp(pd, &init);
    if (qp == nullptr) break;
    qps.push_back(qp);
  }
  return qps;
}

}  // namespace

TEST_CASE("10,000 QPs are created and destroyed with bounded worker memory") {
  constexpr int kQps = 10000;
  test::ServerThread st;
  Context* ctx = open_device(st.path.c_str());
  REQUIRE(ctx != nullptr);
  Pd* pd = alloc_pd(ctx);
  Cq* cq = create_cq(ctx, 1024);
  REQUIRE(cq != nullptr);
  HostMemory base = st.with([](HostServer& s) { return s.memory(); });

  std::vector<Qp*> qps = create_many(pd, cq, kQps);
  INFO(last_error());
  REQUIRE(qps.size() == static_cast<std::size_t>(kQps));
  HostMemory full = st.with([](HostServer& s) { return s.memory(); });
  CHECK(full.qps == static_cast<std::size_t>(kQps));
  double table_per_qp = static_cast<double>(full.table_bytes - base.table_bytes) / kQps;
  double shm_per_qp = static_cast<double>(full.mapped_bytes - base.mapped_bytes) / kQps;
  std::printf("host: %d QPs (SQ 16 + RQ 16): worker table %.0f B/QP (slot %zu B), "
              "shared rings %.0f B/QP mapped\n",
              kQps, table_per_qp, full.bytes_per_qp_slot, shm_per_qp);
  // Ring memory is exactly the page-rounded layout; bookkeeping stays small.
  CHECK(shm_per_qp == 8192.0);
  CHECK(table_per_qp < 1024.0);
  // Doorbells of all of them in one pass.
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  for (Qp* qp : qps) REQUIRE(modify_qp(qp, &a, IBV_QP_STATE) == 0);

  for (Qp* qp : qps) REQUIRE(destroy_qp(qp) == 0);
  // The worker's port acts on the destroy events (here: drains them); then the rings go.
  REQUIRE(st.wait_for([](HostServer& s) {
    for (HostEvent e; s.next_event(&e);) {
    }
    return s.memory().retired_bytes == 0;
  }));
  HostMemory empty = st.with([](HostServer& s) { return s.memory(); });
  CHECK(empty.qps == 0);
  CHECK(empty.mapped_bytes == base.mapped_bytes);
  // Free lists now hold every slot: this is the high-water mark of the tables.
  std::printf("host: worker tables after destroy (slots + free lists) %.0f B/QP\n",
              static_cast<double>(empty.table_bytes - base.table_bytes) / kQps);

  // A second round reuses the slots: the tables do not grow.
  qps = create_many(pd, cq, kQps);
  REQUIRE(qps.size() == static_cast<std::size_t>(kQps));
  HostMemory again = st.with([](HostServer& s) { return s.memory(); });
  CHECK(again.table_bytes == empty.table_bytes);
  CHECK(again.mapped_bytes == full.mapped_bytes);
  for (Qp* qp : qps) REQUIRE(destroy_qp(qp) == 0);
  REQUIRE(destroy_cq(cq) == 0);
  REQUIRE(dealloc_pd(pd) == 0);
  close_device(ctx);
}

TEST_CASE("QP numbers of destroyed QPs are not reused right away") {
  test::ServerThread st;
  Context* ctx = open_device(st.path.c_str());
  Pd* pd = alloc_pd(ctx);
  Cq* cq = create_cq(ctx, 16);
  std::vector<Qp*> a = create_many(pd, cq, 1);
  REQUIRE(a.size() == 1);
  uint32_t old_qpn = a[0]->qp_num;
  destroy_qp(a[0]);
  std::vector<Qp*> b = create_many(pd, cq, 1);
  REQUIRE(b.size() == 1);
  CHECK(b[0]->qp_num != old_qpn);                     // same slot, new generation
  CHECK((b[0]->qp_num & 0xFFFF) == (old_qpn & 0xFFFF));
  CHECK(st.with([&](HostServer& s) { return s.qp_info(old_qpn); }) == nullptr);
  CHECK(b[0]->qp_num > 1);
  CHECK(b[0]->qp_num <= 0xFFFFFF);
  destroy_qp(b[0]);
  destroy_cq(cq);
  dealloc_pd(pd);
  close_device(ctx);
}
