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
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tests/system/rc_app_setup.h"

using namespace tandem::rnic::host;
using namespace tandem::rnic::host::test_app;

namespace {

constexpr std::size_t kBuf = 1 << 20;
std::atomic<bool> g_stop_flag{false};

}  // namespace

int main(int argc, char** argv) {
  g_prog = "txn_stream_app";
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
  g_stop = &g_stop_flag;
  std::signal(SIGINT, [](int) { g_stop_flag.store(true); });
  std::signal(SIGTERM, [](int) { g_stop_flag.store(true); });

  const RcApp app = open_rc_app(sock, name, kBuf, 1, 1);
  uint8_t* buf = app.buf;
  Mr* mr = app.mr;
  Cq* cq = app.cq;
  Qp* qp = app.qp;
  std::memset(buf, 0x5a, kBuf);

  to_init(qp);
  const Peer peer = exchange(dir, name, peer_name, qp, mr, buf);
  connect_rc(qp, peer, peer_ip, static_cast<uint8_t>(timeout));
  touch(dir + "/" + name + ".ready");
  if (!wait_file(dir + "/" + peer_name + ".ready", 30)) die(2, "peer never reached RTS");

  if (mode == "sink") {
    wait_file(dir + "/" + name + ".stop", 3600);
    return 0;
  }
  if (mode != "stream") die(2, "mode must be stream or sink");
  uint64_t done = 0, posted = 0;
  while (!g_stop_flag.load()) {
    while (posted - done < static_cast<uint64_t>(depth)) {
      ibv_sge s{reinterpret_cast<uintptr_t>(buf), size, mr->lkey};
      ibv_send_wr wr{};
      wr.wr_id = posted;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.sg_list = &s;
      wr.num_sge = 1;
      wr.wr.rdma.remote_addr = peer.addr;
      wr.wr.rdma.rkey = peer.rkey;
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
