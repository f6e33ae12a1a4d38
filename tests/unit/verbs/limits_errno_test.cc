// A worker's fair shares as a verbs program sees them through the drop-in
// libibverbs: at its vNIC's limit ibv_create_qp/ibv_create_cq/ibv_alloc_pd
// fail with EAGAIN (the kernel's rdma cgroup answer) and ibv_reg_mr over the
// registered-bytes limit with ENOMEM (RLIMIT_MEMLOCK's). Against a HostServer
// in this process.
#include <catch2/catch.hpp>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "one_device.h"

namespace th = tandem::rnic::host;

namespace {
// Anonymous pages, unmapped at scope exit.
struct Pages {
  explicit Pages(std::size_t n)
      : len(n), p(static_cast<char*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))) {}
  ~Pages() { munmap(p, len); }
  char* data() const { return p; }
  std::size_t size() const { return len; }
  std::size_t len;
  char* p;
};
}  // namespace

TEST_CASE("verbs creates over a vNIC's limit fail with EAGAIN, registered bytes with ENOMEM") {
  th::ServerConfig config;
  config.vnic_ips = {0xC0A80701};
  config.limits.per_vnic[th::resource_index(th::Resource::kQps)] = 2;
  config.limits.per_vnic[th::resource_index(th::Resource::kCqs)] = 1;
  config.limits.per_vnic[th::resource_index(th::Resource::kPds)] = 1;
  config.limits.per_vnic[th::resource_index(th::Resource::kBytes)] = 1 << 20;
  th::test::ServerThread st(config);
  th::test::OneDevice dev(st, "tandem_T_v1", 0xC0A80701);
  ibv_context* ctx = dev.ctx;

  ibv_pd* pd = ibv_alloc_pd(ctx);
  REQUIRE(pd != nullptr);
  errno = 0;
  CHECK(ibv_alloc_pd(ctx) == nullptr);
  CHECK(errno == EAGAIN);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  REQUIRE(cq != nullptr);
  errno = 0;
  CHECK(ibv_create_cq(ctx, 16, nullptr, nullptr, 0) == nullptr);
  CHECK(errno == EAGAIN);

  ibv_qp_init_attr qa{};
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 4;
  qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  ibv_qp* q1 = ibv_create_qp(pd, &qa);
  ibv_qp* q2 = ibv_create_qp(pd, &qa);
  REQUIRE((q1 && q2));
  errno = 0;
  CHECK(ibv_create_qp(pd, &qa) == nullptr);
  CHECK(errno == EAGAIN);
  REQUIRE(ibv_destroy_qp(q2) == 0);
  ibv_qp* q3 = ibv_create_qp(pd, &qa);
  CHECK(q3 != nullptr);

  // 768 KiB registered, then 512 KiB more is over the 1 MiB. Whole pages of
  // their own: registration adopts the pages around a buffer (rnic/host
  // shm_region), which for a heap buffer are other objects' (ASan says so).
  Pages a(768 << 10), b(512 << 10);
  ibv_mr* ma = ibv_reg_mr(pd, a.data(), a.size(), IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(ma != nullptr);
  errno = 0;
  CHECK(ibv_reg_mr(pd, b.data(), b.size(), IBV_ACCESS_LOCAL_WRITE) == nullptr);
  CHECK(errno == ENOMEM);
  REQUIRE(ibv_dereg_mr(ma) == 0);
  ibv_mr* mb = ibv_reg_mr(pd, b.data(), b.size(), IBV_ACCESS_LOCAL_WRITE);
  CHECK(mb != nullptr);

  if (mb) CHECK(ibv_dereg_mr(mb) == 0);
  if (q3) CHECK(ibv_destroy_qp(q3) == 0);
  CHECK(ibv_destroy_qp(q1) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  CHECK(ibv_close_device(ctx) == 0);
  dev.ctx = nullptr;
  unsetenv("TANDEM_DEVICES");
}

TEST_CASE("SRQs over a vNIC's share fail with EAGAIN, deep queues over its queue_bytes with ENOMEM") {
  th::ServerConfig config;
  config.vnic_ips = {0xC0A80701};
  config.max_srqs = 3;
  config.limits.per_vnic[th::resource_index(th::Resource::kSrqs)] = 2;
  config.limits.per_vnic[th::resource_index(th::Resource::kQueueBytes)] = 2 << 20;
  th::test::ServerThread st(config);
  th::test::OneDevice dev(st, "tandem_T_v1", 0xC0A80701);
  ibv_context* ctx = dev.ctx;
  ibv_pd* pd = ibv_alloc_pd(ctx);
  REQUIRE(pd != nullptr);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 64;
  sa.attr.max_sge = 1;
  ibv_srq* s1 = ibv_create_srq(pd, &sa);
  ibv_srq* s2 = ibv_create_srq(pd, &sa);
  REQUIRE((s1 && s2));
  errno = 0;
  CHECK(ibv_create_srq(pd, &sa) == nullptr);
  CHECK(errno == EAGAIN);

  // 2 MiB of queue memory: a 4096-entry send queue's ring (512 KiB) and receive ring fit once,
  // not twice.
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  REQUIRE(cq != nullptr);
  ibv_qp_init_attr qa{};
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 4096;
  qa.cap.max_recv_wr = 4096;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  ibv_qp* q1 = ibv_create_qp(pd, &qa);
  REQUIRE(q1 != nullptr);
  errno = 0;
  CHECK(ibv_create_qp(pd, &qa) == nullptr);
  CHECK(errno == ENOMEM);

  CHECK(ibv_destroy_qp(q1) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_destroy_srq(s2) == 0);
  CHECK(ibv_destroy_srq(s1) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  CHECK(ibv_close_device(ctx) == 0);
  dev.ctx = nullptr;
  unsetenv("TANDEM_DEVICES");
}
