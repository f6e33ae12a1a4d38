// Tenant traffic for the DPU transaction test (dpu_txn_traffic_test.py):
// attaches to a tandem-rnic worker through rnic/host, connects one RC QP to
// a peer application (QPN, rkey and address exchanged through files in a
// directory), and
//   stream: keeps DEPTH RDMA WRITEs of SIZE bytes outstanding until SIGINT,
//           then prints how many completed; a completion error exits 1;
//   sink:   connects and waits for DIR/NAME.stop.
// TIMEOUT is the QP's IBV_QP_TIMEOUT exponent (4.096 us << TIMEOUT): the test
// withdraws this flow's table entries thousands of times, and every
// withdrawal costs the sender at least one retransmission timeout.
// Exit 0 = ran and stopped cleanly, 1 = completion error, 2 = set-up failed.
#include <arpa/inet.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "rnic/host/verbs.h"

using namespace tandem::rnic::host;

namespace {

constexpr std::size_t kBuf = 1 << 20;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
std::atomic<bool> g_stop{false};

[[noreturn]] void die(int code, const std::string& what) {
  std::fprintf(stderr, "txn_stream_app: %s (%s)\n", what.c_str(), last_error());
  std::exit(code);
}

bool wait_file(const std::string& path, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end && !g_stop.load()) {
    if (access(path.c_str(), F_OK) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

void touch(const std::string& path, const std::string& text = "") {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 10) {
    std::fprintf(stderr, "usage: %s stream|sink SOCKET DIR NAME PEER_NAME PEER_OVERLAY_IP TIMEOUT SIZE DEPTH\n",
                 argv[0]);
    return 2;
  }
  const std::string mode = argv[1], sock = argv[2], dir = argv[3], name = argv[4], peer_name = argv[5];
  in_addr peer_ip{};
  if (inet_pton(AF_INET, argv[6], &peer_ip) != 1) die(2, "bad peer IP");
  const int timeout = std::atoi(argv[7]);
  const uint32_t size = static_cast<uint32_t>(std::atoi(argv[8]));
  const int depth = std::atoi(argv[9]);
  if (timeout < 1 || timeout > 31 || size == 0 || size > kBuf || depth < 1 || depth > 64)
    die(2, "TIMEOUT 1..31, SIZE 1..1 MiB, DEPTH 1..64");
  std::signal(SIGINT, [](int) { g_stop.store(true); });
  std::signal(SIGTERM, [](int) { g_stop.store(true); });

  DeviceAttr attr;
  attr.name = name.c_str();
  attr.huge_buffers = false;
  Context* ctx = open_device(sock.c_str(), attr);
  if (!ctx) die(2, "open_device " + sock);
  Pd* pd = alloc_pd(ctx);
  auto* buf = static_cast<uint8_t*>(alloc_buf(ctx, kBuf));
  if (!pd || !buf) die(2, "alloc");
  std::memset(buf, 0x5a, kBuf);
  Mr* mr = reg_mr(pd, buf, kBuf, kAccess);
  Cq* cq = create_cq(ctx, 256);
  QpInitAttr qi;
  qi.send_cq = cq;
  qi.recv_cq = cq;
  qi.cap.max_send_wr = 64;
  qi.cap.max_recv_wr = 1;
  qi.cap.max_send_sge = 1;
  qi.cap.max_recv_sge = 1;
  Qp* qp = mr && cq ? create_qp(pd, &qi) : nullptr;
  if (!qp) die(2, "reg_mr/create_cq/create_qp");

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = kAccess;
  if (modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) die(2, "INIT");
  touch(dir + "/" + name + ".qp", std::to_string(qp->qp_num) + " " + std::to_string(mr->rkey) + " " +
                                      std::to_string(reinterpret_cast<uintptr_t>(buf)));
  if (!wait_file(dir + "/" + peer_name + ".qp", 30)) die(2, "peer did not publish its QP");
  uint32_t peer_qpn = 0, peer_rkey = 0;
  uint64_t peer_addr = 0;
  std::ifstream(dir + "/" + peer_name + ".qp") >> peer_qpn >> peer_rkey >> peer_addr;

  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = 100;
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
  a.sq_psn = 100;
  a.timeout = static_cast<uint8_t>(timeout);
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  if (modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                            IBV_QP_MAX_QP_RD_ATOMIC))
    die(2, "RTS");
  touch(dir + "/" + name + ".ready");
  if (!wait_file(dir + "/" + peer_name + ".ready", 30)) die(2, "peer never reached RTS");

  if (mode == "sink") {
    wait_file(dir + "/" + name + ".stop", 3600);
    return 0;
  }
  if (mode != "stream") die(2, "mode must be stream or sink");
  uint64_t done = 0, posted = 0;
  while (!g_stop.load()) {
    while (posted - done < static_cast<uint64_t>(depth)) {
      ibv_sge s{reinterpret_cast<uintptr_t>(buf), size, mr->lkey};
      ibv_send_wr wr{};
      wr.wr_id = posted;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.sg_list = &s;
      wr.num_sge = 1;
      wr.wr.rdma.remote_addr = peer_addr;
      wr.wr.rdma.rkey = peer_rkey;
      ibv_send_wr* bad = nullptr;
      if (post_send(qp, &wr, &bad)) die(1, "post_send");
      ++posted;
    }
    ibv_wc wc[16];
    int n = poll_cq(cq, 16, wc);
    for (int i = 0; i < n; ++i)
      if (wc[i].status != IBV_WC_SUCCESS) die(1, "completion error " + std::to_string(wc[i].status) +
                                                     " after " + std::to_string(done) + " WRITEs");
    if (n > 0 && done == 0) touch(dir + "/" + name + ".streaming");
    done += static_cast<uint64_t>(n > 0 ? n : 0);
    // A few thousand frames a second are plenty, and the lab shares 2 cores.
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  std::printf("%s: %llu WRITEs completed\n", name.c_str(), static_cast<unsigned long long>(done));
  return 0;
}
