// Parent domains (ibv_alloc_parent_domain) through the drop-in libibverbs:
// accepted wherever a PD is, protection that of the PD under them, their
// allocators kept but not called (a Tandem queue is worker-mapped memory),
// and the PD under a live parent domain not freed (EBUSY). Against a
// HostServer in this process.
#include <catch2/catch.hpp>
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <cerrno>

#include "one_device.h"

namespace th = tandem::rnic::host;

namespace {
int alloc_calls = 0;
void* counting_alloc(ibv_pd*, void*, size_t, size_t, uint64_t) {
  ++alloc_calls;
  return IBV_ALLOCATOR_USE_DEFAULT;
}
void counting_free(ibv_pd*, void*, void*, uint64_t) {}
}  // namespace

TEST_CASE("a parent domain stands for its PD in every verb; the PD under it stays until it goes") {
  th::ServerConfig config;
  config.vnic_ips = {0xC0A80701};
  th::test::ServerThread st(config);
  th::test::OneDevice dev(st, "tandem_T_v1", 0xC0A80701);
  ibv_context* ctx = dev.ctx;

  ibv_pd* pd = ibv_alloc_pd(ctx);
  REQUIRE(pd != nullptr);
  ibv_parent_domain_init_attr pa{};
  pa.pd = pd;
  pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  pa.alloc = counting_alloc;
  pa.free = counting_free;
  ibv_pd* parent = ibv_alloc_parent_domain(ctx, &pa);
  REQUIRE(parent != nullptr);

  SECTION("bad attributes are EINVAL, a thread domain EOPNOTSUPP") {
    ibv_parent_domain_init_attr bad = pa;
    bad.pd = parent;  // a parent over a parent
    errno = 0;
    CHECK(ibv_alloc_parent_domain(ctx, &bad) == nullptr);
    CHECK(errno == EINVAL);
    bad = pa;
    bad.free = nullptr;  // allocators come in pairs
    errno = 0;
    CHECK(ibv_alloc_parent_domain(ctx, &bad) == nullptr);
    CHECK(errno == EINVAL);
    bad = pa;
    bad.comp_mask |= 1u << 7;
    errno = 0;
    CHECK(ibv_alloc_parent_domain(ctx, &bad) == nullptr);
    CHECK(errno == EINVAL);
    bad = pa;
    bad.td = reinterpret_cast<ibv_td*>(&bad);
    errno = 0;
    CHECK(ibv_alloc_parent_domain(ctx, &bad) == nullptr);
    CHECK(errno == EOPNOTSUPP);
  }

  SECTION("MRs, CQs and QPs take the parent domain; the PD under it is busy until it is freed") {
    const std::size_t len = 1 << 16;
    void* buf = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(buf != MAP_FAILED);
    ibv_mr* mr = ibv_reg_mr(parent, buf, len, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(mr != nullptr);
    CHECK(mr->pd == parent);

    ibv_cq_init_attr_ex ca{};
    ca.cqe = 16;
    ca.wc_flags = IBV_WC_STANDARD_FLAGS;
    ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    ca.parent_domain = pd;  // a plain PD is not a parent domain
    errno = 0;
    CHECK(ibv_create_cq_ex(ctx, &ca) == nullptr);
    CHECK(errno == EINVAL);
    ca.parent_domain = parent;
    ibv_cq_ex* cq = ibv_create_cq_ex(ctx, &ca);
    REQUIRE(cq != nullptr);

    ibv_qp_init_attr qa{};
    qa.send_cq = ibv_cq_ex_to_cq(cq);
    qa.recv_cq = ibv_cq_ex_to_cq(cq);
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 4;
    qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(parent, &qa);
    REQUIRE(qp != nullptr);
    CHECK(ibv_dealloc_pd(pd) == EBUSY);  // a parent domain is over it
    CHECK(ibv_destroy_qp(qp) == 0);
    CHECK(ibv_dereg_mr(mr) == 0);
    CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);
    munmap(buf, len);
  }
  CHECK(ibv_dealloc_pd(parent) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  CHECK(alloc_calls == 0);  // kept, not called (see rnic/verbs/objects.cc TandemPd)
}
