// The tenant of tests/system/wire_bounds_test.py: on a worker whose peer is
// a packet crafter (scapy), one MR over a sparse memfd larger than 4 GiB and
// kQps RC QPs connected to made-up remote QPNs (0x100 + i), so crafted RDMA
// READ requests, duplicates, ACKs and READ responses meet a real worker (a QP
// that NAKs a request goes to ERROR: each such case gets a QP of its own).
//   DIR/app.qp:    "RKEY VA LEN QPN0 QPN1 ..." once all of them are in RTS
//                  (QP i: rq_psn 1000 * (i + 1), sq_psn 5000 + 1000 * i);
//   DIR/go:        then it posts one signalled 64-byte RDMA WRITE on QP 0
//                  (remote va 0x1000, rkey 0x77) and writes DIR/done with
//                  "EARLY STATUS" (EARLY: completions seen before the WRITE,
//                  which forged ACKs must not cause; STATUS: the WRITE's
//                  ibv_wc_status, or -1 if none came within 10 s);
//   DIR/exit:      then it exits 0.
// The buffer holds a pattern at offsets 0 and 4 GiB + 4 KiB (8 KiB each):
// only those pages are written, the rest of the memfd stays a hole.
// Exit 2 = set-up failed.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/system/rc_app_setup.h"

using namespace tandem::rnic::host;
using namespace tandem::rnic::host::test_app;

namespace {

constexpr int kQps = 4;
constexpr std::size_t kPatternLen = 8192;
constexpr uint64_t kHighOffset = (uint64_t{4} << 30) + 4096;

uint8_t pattern(std::size_t i) { return static_cast<uint8_t>((i * 7 + 3) ^ (i >> 8)); }

void connect(Qp* qp, uint32_t dest_qpn, in_addr peer_ip, uint32_t rq_psn, uint32_t sq_psn) {
  to_init(qp);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  std::memcpy(gid + 12, &peer_ip.s_addr, 4);
  std::memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
  if (modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die(2, "RTR");
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = sq_psn;
  a.timeout = 14;  // 67 ms: the crafter answers the WRITE well within it
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  if (modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                            IBV_QP_MAX_QP_RD_ATOMIC))
    die(2, "RTS");
}

}  // namespace

int main(int argc, char** argv) {
  g_prog = "wire_bounds_app";
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s SOCKET DIR PEER_IP MR_BYTES\n", argv[0]);
    return 2;
  }
  const std::string sock = argv[1], dir = argv[2];
  in_addr peer_ip{};
  if (inet_pton(AF_INET, argv[3], &peer_ip) != 1) die(2, "bad peer IP");
  const std::size_t len = std::strtoull(argv[4], nullptr, 0);
  if (len < kHighOffset + kPatternLen) die(2, "MR_BYTES must exceed 4 GiB + 12 KiB");

  DeviceAttr attr;
  attr.name = "wire_bounds";
  attr.huge_buffers = false;  // a sparse memfd: ftruncate'd, only the pattern's pages written
  Context* ctx = open_device(sock.c_str(), attr);
  if (!ctx) die(2, "open_device " + sock);
  Pd* pd = alloc_pd(ctx);
  auto* buf = static_cast<uint8_t*>(pd ? alloc_buf(ctx, len) : nullptr);
  if (!buf) die(2, "alloc_pd/alloc_buf");
  for (std::size_t i = 0; i < kPatternLen; ++i) buf[i] = buf[kHighOffset + i] = pattern(i);
  Mr* mr = reg_mr(pd, buf, len, kAccess);
  if (!mr) die(2, "reg_mr of " + std::to_string(len) + " bytes");
  Cq* cq = create_cq(ctx, 64);
  if (!cq) die(2, "create_cq");
  Qp* qps[kQps] = {};
  for (int i = 0; i < kQps; ++i) {
    QpInitAttr qi;
    qi.send_cq = cq;
    qi.recv_cq = cq;
    qi.cap.max_send_wr = 16;
    qi.cap.max_recv_wr = 16;
    qi.cap.max_send_sge = 1;
    qi.cap.max_recv_sge = 1;
    qps[i] = create_qp(pd, &qi);
    if (!qps[i]) die(2, "create_qp");
    connect(qps[i], 0x100 + i, peer_ip, 1000 * (i + 1), 5000 + 1000 * i);
  }
  std::string info = std::to_string(mr->rkey) + " " + std::to_string(reinterpret_cast<uintptr_t>(buf)) + " " +
                     std::to_string(len);
  for (Qp* q : qps) info += " " + std::to_string(q->qp_num);
  touch(dir + "/app.qp", info);

  if (!wait_file(dir + "/go", 120)) die(2, "no go");
  ibv_wc wc[8];
  int early = 0;
  for (int n; (n = poll_cq(cq, 8, wc)) > 0;) early += n;
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), 64, mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 42;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = 0x1000;
  wr.wr.rdma.rkey = 0x77;
  ibv_send_wr* bad = nullptr;
  if (post_send(qps[0], &wr, &bad)) die(2, "post_send");
  int status = -1;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (status < 0 && std::chrono::steady_clock::now() < end) {
    const int n = poll_cq(cq, 1, wc);
    if (n < 0) die(2, "poll_cq");
    if (n == 1 && wc[0].wr_id == 42) status = wc[0].status;
    else if (n == 1) ++early;
  }
  touch(dir + "/done", std::to_string(early) + " " + std::to_string(status));
  wait_file(dir + "/exit", 60);
  for (Qp* q : qps) destroy_qp(q);
  destroy_cq(cq);
  dereg_mr(mr);
  dealloc_pd(pd);
  close_device(ctx);
  return 0;
}
