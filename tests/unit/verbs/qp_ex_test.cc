// The extended send API (ibv_create_qp_ex, ibv_qp_to_qp_ex, ibv_wr_*) of the
// drop-in libibverbs, against a HostServer in this process standing in for the
// worker: a batch built with ibv_wr_* leaves in the SQ ring exactly the bytes
// ibv_post_send writes for the same WRs (atomics too), reaches the worker and
// completes; wr_abort and every error post nothing; unsupported ops fail at
// wr_complete; UD QPs address each WR with wr_set_ud_addr.
#include <catch2/catch.hpp>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "one_device.h"
#include "rnic/verbs/qp_ex.h"

namespace th = tandem::rnic::host;
using tandem::rnic::verbs::QpHead;

namespace {

th::Qp* host_qp(ibv_qp* qp) { return reinterpret_cast<QpHead*>(qp)->h; }
uint32_t produced(ibv_qp* qp) { return host_qp(qp)->sq.produced(); }

int to_rts(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return rc;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = 0x99;
  a.rq_psn = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
  std::memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
  if (int rc = ibv_modify_qp(qp, &a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return rc;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 1;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_MAX_QP_RD_ATOMIC);
}

struct Lab {
  Lab() {
    config.vnic_ips = {0xC0A80801};
    st = std::make_unique<th::test::ServerThread>(config);
    dev = std::make_unique<th::test::OneDevice>(*st, "tandem_X_v1", 0xC0A80801);
    ctx = dev->ctx;
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    REQUIRE((pd && cq));
    // Whole pages of its own (registration adopts the pages around a buffer).
    buf = static_cast<char*>(mmap(nullptr, kBuf, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(buf != MAP_FAILED);
    for (std::size_t i = 0; i < kBuf; ++i) buf[i] = static_cast<char>(i * 13);
    mr = ibv_reg_mr(pd, buf, kBuf, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(mr != nullptr);
  }
  ~Lab() {
    ibv_dereg_mr(mr);
    munmap(buf, kBuf);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
  }
  ibv_qp_init_attr_ex attr_ex(uint64_t ops) const {
    ibv_qp_init_attr_ex a{};
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 8;
    a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = 2;
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = 32;
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.pd = pd;
    a.send_ops_flags = ops;
    return a;
  }
  static constexpr std::size_t kBuf = 1 << 16;
  th::ServerConfig config;
  std::unique_ptr<th::test::ServerThread> st;
  std::unique_ptr<th::test::OneDevice> dev;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  char* buf = nullptr;
  ibv_mr* mr = nullptr;
};

constexpr uint64_t kOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
                          IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                          IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

}  // namespace

TEST_CASE("ibv_create_qp_ex makes an RC QP whose ibv_qp_ex has every wr_* pointer set") {
  Lab lab;
  ibv_qp_init_attr_ex a = lab.attr_ex(kOps);
  ibv_qp* qp = ibv_create_qp_ex(lab.ctx, &a);
  REQUIRE(qp != nullptr);
  CHECK(qp->qp_type == IBV_QPT_RC);
  CHECK(qp->pd == lab.pd);
  CHECK(a.cap.max_send_wr >= 8);  // granted caps written back
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
  REQUIRE(x != nullptr);
  CHECK(&x->qp_base == qp);
  CHECK(x->comp_mask == 0);
  CHECK((x->wr_atomic_cmp_swp && x->wr_atomic_fetch_add && x->wr_bind_mw && x->wr_local_inv && x->wr_rdma_read &&
         x->wr_rdma_write && x->wr_rdma_write_imm && x->wr_send && x->wr_send_imm && x->wr_send_inv &&
         x->wr_send_tso && x->wr_set_ud_addr && x->wr_set_xrc_srqn && x->wr_set_inline_data &&
         x->wr_set_inline_data_list && x->wr_set_sge && x->wr_set_sge_list && x->wr_start && x->wr_complete &&
         x->wr_abort && x->wr_atomic_write));

  // As rdma-core: QPs made otherwise have no ibv_qp_ex (NULL), including the header's
  // ibv_create_qp_ex with a PD alone, which it sends to ibv_create_qp.
  ibv_qp_init_attr_ex plain = lab.attr_ex(0);
  plain.comp_mask = IBV_QP_INIT_ATTR_PD;
  ibv_qp* q2 = ibv_create_qp_ex(lab.ctx, &plain);
  REQUIRE(q2 != nullptr);
  CHECK(ibv_qp_to_qp_ex(q2) == nullptr);

  // Refused cleanly: ops Tandem does not execute, UD QPs with RC ops, XRC domains, no PD.
  for (uint64_t ops : {uint64_t{IBV_QP_EX_WITH_LOCAL_INV}, uint64_t{IBV_QP_EX_WITH_BIND_MW},
                       uint64_t{IBV_QP_EX_WITH_SEND_WITH_INV}, uint64_t{IBV_QP_EX_WITH_TSO},
                       uint64_t{IBV_QP_EX_WITH_ATOMIC_WRITE}}) {
    ibv_qp_init_attr_ex bad = lab.attr_ex(kOps | ops);
    errno = 0;
    CHECK(ibv_create_qp_ex(lab.ctx, &bad) == nullptr);
    CHECK(errno == EOPNOTSUPP);
  }
  ibv_qp_init_attr_ex ud = lab.attr_ex(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE);
  ud.qp_type = IBV_QPT_UD;
  errno = 0;
  CHECK(ibv_create_qp_ex(lab.ctx, &ud) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  ud.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  ibv_qp* udq = ibv_create_qp_ex(lab.ctx, &ud);
  REQUIRE(udq != nullptr);
  CHECK(udq->qp_type == IBV_QPT_UD);
  CHECK(ibv_qp_to_qp_ex(udq) != nullptr);
  CHECK(ibv_destroy_qp(udq) == 0);
  ibv_qp_init_attr_ex xrc = lab.attr_ex(kOps);
  xrc.comp_mask |= IBV_QP_INIT_ATTR_XRCD;
  errno = 0;
  CHECK(ibv_create_qp_ex(lab.ctx, &xrc) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  ibv_qp_init_attr_ex nopd = lab.attr_ex(kOps);
  nopd.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  errno = 0;
  CHECK(ibv_create_qp_ex(lab.ctx, &nopd) == nullptr);
  CHECK(errno == EINVAL);

  CHECK(ibv_destroy_qp(q2) == 0);
  CHECK(ibv_destroy_qp(qp) == 0);
}

TEST_CASE("ibv_wr_* batches leave the ring bytes ibv_post_send writes, and reach the worker") {
  Lab lab;
  ibv_qp_init_attr_ex a = lab.attr_ex(kOps);
  ibv_qp* ex = ibv_create_qp_ex(lab.ctx, &a);
  ibv_qp_init_attr_ex la = lab.attr_ex(0);
  ibv_qp* legacy = ibv_create_qp(lab.pd, reinterpret_cast<ibv_qp_init_attr*>(&la));
  REQUIRE((ex && legacy));
  ibv_qp_ex* x = ibv_qp_to_qp_ex(ex);
  REQUIRE(x != nullptr);

  // Before RTS the batch is refused as ibv_post_send is (EINVAL), and nothing is posted.
  ibv_wr_start(x);
  ibv_wr_send(x);
  ibv_wr_set_sge(x, lab.mr->lkey, reinterpret_cast<uintptr_t>(lab.buf), 8);
  CHECK(ibv_wr_complete(x) == EINVAL);
  CHECK(produced(ex) == 0);

  REQUIRE(to_rts(ex) == 0);
  REQUIRE(to_rts(legacy) == 0);

  const auto at = [&](std::size_t off) { return reinterpret_cast<uintptr_t>(lab.buf + off); };
  const uint32_t lkey = lab.mr->lkey;
  char inl[20] = "inline payload 0123";

  // The reference: five WRs through ibv_post_send.
  ibv_sge w_sges[2] = {{at(100), 300, lkey}, {at(8000), 50, lkey}};
  ibv_sge i_sge = {reinterpret_cast<uintptr_t>(inl), sizeof inl, 0};
  ibv_sge s_sge = {at(4096), 64, lkey};
  ibv_sge r_sge = {at(60000), 1000, lkey};
  ibv_sge a_sge = {at(62000), 8, lkey};
  ibv_send_wr wrs[7]{};
  wrs[0] = {.wr_id = 1, .next = &wrs[1], .sg_list = w_sges, .num_sge = 2, .opcode = IBV_WR_RDMA_WRITE};
  wrs[0].wr.rdma = {0x7f0000001000, 0x4242};
  wrs[1] = {.wr_id = 2, .next = &wrs[2], .sg_list = &s_sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
            .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0xabcdef01)};
  wrs[1].wr.rdma = {0x2000, 7};
  wrs[2] = {.wr_id = 3, .next = &wrs[3], .sg_list = &i_sge, .num_sge = 1, .opcode = IBV_WR_SEND,
            .send_flags = IBV_SEND_INLINE};
  wrs[3] = {.wr_id = 4, .next = &wrs[4], .sg_list = &s_sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
            .send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED, .imm_data = htonl(5)};
  wrs[4] = {.wr_id = 5, .next = &wrs[5], .sg_list = &r_sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
            .send_flags = IBV_SEND_SIGNALED};
  wrs[4].wr.rdma = {0x1000, 9};
  wrs[5] = {.wr_id = 6, .next = &wrs[6], .sg_list = &a_sge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
            .send_flags = IBV_SEND_SIGNALED};
  wrs[5].wr.atomic = {0x3000, 17, 0, 11};
  wrs[6] = {.wr_id = 7, .next = nullptr, .sg_list = &a_sge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
            .send_flags = IBV_SEND_SIGNALED};
  wrs[6].wr.atomic = {0x3008, 5, 6, 11};
  ibv_send_wr* bad = nullptr;
  REQUIRE(ibv_post_send(legacy, wrs, &bad) == 0);

  // The same through ibv_wr_*, from arrays that are gone (overwritten) before wr_complete.
  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = 0;
  ibv_wr_rdma_write(x, 0x4242, 0x7f0000001000);
  {
    ibv_sge list[2] = {w_sges[0], w_sges[1]};
    ibv_wr_set_sge_list(x, 2, list);
    std::memset(list, 0, sizeof list);
  }
  x->wr_id = 2;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write_imm(x, 7, 0x2000, htonl(0xabcdef01));
  ibv_wr_set_sge(x, lkey, at(4096), 64);
  x->wr_id = 3;
  x->wr_flags = 0;
  ibv_wr_send(x);
  char copy[sizeof inl];
  std::memcpy(copy, inl, sizeof inl);
  ibv_wr_set_inline_data(x, copy, sizeof copy);
  std::memset(copy, 0, sizeof copy);
  x->wr_id = 4;
  x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
  ibv_wr_send_imm(x, htonl(5));
  ibv_wr_set_sge(x, lkey, at(4096), 64);
  x->wr_id = 5;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_read(x, 9, 0x1000);
  ibv_wr_set_sge(x, lkey, at(60000), 1000);
  x->wr_id = 6;
  ibv_wr_atomic_fetch_add(x, 11, 0x3000, 17);
  ibv_wr_set_sge(x, lkey, at(62000), 8);
  x->wr_id = 7;
  ibv_wr_atomic_cmp_swp(x, 11, 0x3008, 5, 6);
  ibv_wr_set_sge(x, lkey, at(62000), 8);
  CHECK(produced(ex) == 0);  // nothing visible before wr_complete
  REQUIRE(ibv_wr_complete(x) == 0);

  REQUIRE(produced(legacy) == 7);
  REQUIRE(produced(ex) == 7);
  CHECK(host_qp(ex)->sq.at(5).atomic.compare_add == 17);
  CHECK(host_qp(ex)->sq.at(6).atomic.swap == 6);
  for (uint32_t i = 0; i < 7; ++i) {
    INFO("WQE " << i);
    CHECK(std::memcmp(&host_qp(ex)->sq.at(i), &host_qp(legacy)->sq.at(i), sizeof(th::SendWqe)) == 0);
  }
  CHECK(std::memcmp(host_qp(ex)->sq.at(2).inline_data, inl, sizeof inl) == 0);

  // The worker takes them and completes them: the signaled ones come back with their wr_id.
  std::vector<th::SendWork> work(8);
  lab.st->with([&](th::HostServer& s) {
    REQUIRE(s.fetch_send(ex->qp_num, work) == 7);
    CHECK(work[0].length == 350);
    CHECK(work[2].length == sizeof inl);
    CHECK(work[4].opcode == IBV_WR_RDMA_READ);
    CHECK(work[5].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD);
    CHECK(work[5].compare_add == 17);
    CHECK(work[6].swap == 6);
    for (int i = 0; i < 7; ++i) CHECK(s.complete_send(ex->qp_num, work[i], IBV_WC_SUCCESS));
  });
  ibv_wc wc[8];
  int got = 0;
  for (int tries = 0; tries < 1000 && got < 5; ++tries) got += ibv_poll_cq(lab.cq, 8 - got, wc + got);
  REQUIRE(got == 5);
  CHECK(wc[3].opcode == IBV_WC_FETCH_ADD);
  CHECK(wc[4].opcode == IBV_WC_COMP_SWAP);
  CHECK(wc[0].wr_id == 2);
  CHECK(wc[0].opcode == IBV_WC_RDMA_WRITE);
  CHECK(wc[1].wr_id == 4);
  CHECK(wc[1].opcode == IBV_WC_SEND);
  CHECK(wc[2].wr_id == 5);
  CHECK(wc[2].opcode == IBV_WC_RDMA_READ);
  CHECK(wc[2].qp_num == ex->qp_num);

  CHECK(ibv_destroy_qp(legacy) == 0);
  CHECK(ibv_destroy_qp(ex) == 0);
}

TEST_CASE("wr_abort and every error post nothing; unsupported ops fail at wr_complete") {
  Lab lab;
  ibv_qp_init_attr_ex a = lab.attr_ex(IBV_QP_EX_WITH_RDMA_WRITE);
  ibv_qp* qp = ibv_create_qp_ex(lab.ctx, &a);
  REQUIRE(qp != nullptr);
  REQUIRE(to_rts(qp) == 0);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
  REQUIRE(x != nullptr);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(lab.buf);
  const uint32_t lkey = lab.mr->lkey;

  ibv_wr_start(x);
  ibv_wr_rdma_write(x, 1, 0x1000);
  ibv_wr_set_sge(x, lkey, addr, 16);
  ibv_wr_abort(x);
  CHECK(produced(qp) == 0);
  ibv_wr_start(x);
  CHECK(ibv_wr_complete(x) == 0);  // an empty batch
  CHECK(produced(qp) == 0);

  // Each case: one good WR first, then the bad step; wr_complete fails and posts neither.
  struct Case {
    const char* what;
    int err;
    void (*bad)(ibv_qp_ex*, uint32_t, uintptr_t);
  };
  const Case cases[] = {
      {"cmp_swp without its 8-byte SGE", EINVAL,
       [](ibv_qp_ex* x, uint32_t, uintptr_t) { ibv_wr_atomic_cmp_swp(x, 1, 0x1000, 1, 2); }},
      {"fetch_add into 4 bytes", EINVAL,
       [](ibv_qp_ex* x, uint32_t k, uintptr_t p) {
         ibv_wr_atomic_fetch_add(x, 1, 0x1000, 1);
         ibv_wr_set_sge(x, k, p, 4);
       }},
      {"bind_mw", EOPNOTSUPP, [](ibv_qp_ex* x, uint32_t, uintptr_t) { ibv_wr_bind_mw(x, nullptr, 1, nullptr); }},
      {"local_inv", EOPNOTSUPP, [](ibv_qp_ex* x, uint32_t, uintptr_t) { ibv_wr_local_inv(x, 1); }},
      {"send_inv", EOPNOTSUPP, [](ibv_qp_ex* x, uint32_t, uintptr_t) { ibv_wr_send_inv(x, 1); }},
      {"ud_addr", EINVAL, [](ibv_qp_ex* x, uint32_t, uintptr_t) { ibv_wr_set_ud_addr(x, nullptr, 1, 1); }},
      {"xrc_srqn", EINVAL, [](ibv_qp_ex* x, uint32_t, uintptr_t) { ibv_wr_set_xrc_srqn(x, 1); }},
      {"too many SGEs", EINVAL,
       [](ibv_qp_ex* x, uint32_t k, uintptr_t p) {
         ibv_wr_send(x);
         const ibv_sge l[3] = {{p, 1, k}, {p, 1, k}, {p, 1, k}};
         ibv_wr_set_sge_list(x, 3, l);
       }},
      {"inline too long", ENOMEM,
       [](ibv_qp_ex* x, uint32_t, uintptr_t) {
         static char big[4096];
         ibv_wr_send(x);
         ibv_wr_set_inline_data(x, big, sizeof big);
       }},
      {"inline READ", EINVAL,
       [](ibv_qp_ex* x, uint32_t, uintptr_t) {
         static char small[8];
         ibv_wr_rdma_read(x, 1, 0x1000);
         ibv_wr_set_inline_data(x, small, sizeof small);
       }},
      {"more WRs than the SQ", ENOMEM,
       [](ibv_qp_ex* x, uint32_t k, uintptr_t p) {
         for (int i = 0; i < 64; ++i) {
           ibv_wr_send(x);
           ibv_wr_set_sge(x, k, p, 4);
         }
       }},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    ibv_wr_start(x);
    ibv_wr_rdma_write(x, 1, 0x1000);
    ibv_wr_set_sge(x, lkey, addr, 16);
    c.bad(x, lkey, addr);
    ibv_wr_set_sge(x, lkey, addr, 16);  // ignored after the error
    CHECK(ibv_wr_complete(x) == c.err);
    CHECK(produced(qp) == 0);
  }
  // A setter before any op.
  ibv_wr_start(x);
  ibv_wr_set_sge(x, lkey, addr, 16);
  ibv_wr_send(x);
  CHECK(ibv_wr_complete(x) == EINVAL);
  CHECK(produced(qp) == 0);

  // And the QP still posts afterwards (inline list: two pieces, concatenated).
  ibv_wr_start(x);
  x->wr_id = 77;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(x);
  const ibv_data_buf pieces[2] = {{const_cast<char*>("abc"), 3}, {const_cast<char*>("defg"), 4}};
  ibv_wr_set_inline_data_list(x, 2, pieces);
  REQUIRE(ibv_wr_complete(x) == 0);
  REQUIRE(produced(qp) == 1);
  const th::SendWqe& w = host_qp(qp)->sq.at(0);
  CHECK(w.wr_id == 77);
  CHECK(w.inline_len == 7);
  CHECK(std::memcmp(w.inline_data, "abcdefg", 7) == 0);
  CHECK(ibv_destroy_qp(qp) == 0);
}
