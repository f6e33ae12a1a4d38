// Test helpers: one application's usual verbs setup, and the
// RESET -> INIT -> RTR -> RTS walk a verbs program does before posting.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>

#include "rnic/host/verbs.h"

namespace tandem::rnic::host::test {

inline constexpr int kAllAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// One signaled WR of one SGE (an RDMA WRITE unless told otherwise).
inline int post_one(Qp* qp, uint64_t wr_id, ibv_sge sge, ibv_wr_opcode op = IBV_WR_RDMA_WRITE) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad;
  return post_send(qp, &wr, &bad);
}

inline int to_rts(Qp* qp, uint32_t remote_qpn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = kAllAccess;
  if (int rc = modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return rc;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = 100;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  // ::ffff:10.0.0.2, the RoCEv2 GID of an IPv4 peer
  uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
  std::memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
  if (int rc = modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return rc;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 200;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return modify_qp(qp, &a,
                   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

// One attached application with a PD, a 64 KiB registered buffer, a CQ and an RC QP.
struct App {
  Context* ctx = nullptr;
  Pd* pd = nullptr;
  uint8_t* buf = nullptr;
  Mr* mr = nullptr;
  Cq* cq = nullptr;
  Qp* qp = nullptr;
  static constexpr std::size_t kBufBytes = 64 * 1024;

  explicit App(const std::string& path, uint32_t sq = 16, uint32_t rq = 16, int sq_sig_all = 0) {
    DeviceAttr attr;
    attr.name = "test-app";
    ctx = open_device(path.c_str(), attr);
    REQUIRE(ctx != nullptr);
    pd = alloc_pd(ctx);
    REQUIRE(pd != nullptr);
    buf = static_cast<uint8_t*>(alloc_buf(ctx, kBufBytes));
    REQUIRE(buf != nullptr);
    mr = reg_mr(pd, buf, kBufBytes, kAllAccess);
    REQUIRE(mr != nullptr);
    cq = create_cq(ctx, 64);
    REQUIRE(cq != nullptr);
    QpInitAttr init;
    init.send_cq = cq;
    init.recv_cq = cq;
    init.cap.max_send_wr = sq;
    init.cap.max_recv_wr = rq;
    init.cap.max_send_sge = 4;
    init.cap.max_recv_sge = 4;
    init.cap.max_inline_data = 64;
    init.sq_sig_all = sq_sig_all;
    qp = create_qp(pd, &init);
    REQUIRE(qp != nullptr);
  }
  ~App() {
    if (qp) destroy_qp(qp);
    if (cq) destroy_cq(cq);
    if (mr) dereg_mr(mr);
    if (buf) free_buf(ctx, buf);
    if (pd) dealloc_pd(pd);
    if (ctx) close_device(ctx);
  }
  App(const App&) = delete;
  App& operator=(const App&) = delete;

  ibv_sge sge(std::size_t offset, uint32_t length) const {
    return ibv_sge{reinterpret_cast<uintptr_t>(buf) + offset, length, mr->lkey};
  }

  // Polls until n completions arrived (bounded), returns how many.
  int poll(ibv_wc* wc, int n) {
    int got = 0;
    for (int i = 0; i < 200000 && got < n; ++i) {
      int r = poll_cq(cq, n - got, wc + got);
      if (r < 0) return r;
      got += r;
    }
    return got;
  }
};

}  // namespace tandem::rnic::host::test
