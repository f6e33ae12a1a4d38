// A tiny tenant application for the RNIC system test: attaches to a
// tandem-rnic worker through rnic/host, connects one RC QP to a peer
// application on another worker (QPN, rkey and address exchanged through
// files in a directory, as verbs programs exchange them out of band), and
//   verify: WRITE, SEND and READ in both directions, every byte checked;
//   stream: WRITEs back to back until killed (the app-death test);
//   sink:   connects and waits (the peer of `stream`).
// Exit 0 = every check passed, 1 = a check failed, 2 = set-up failed.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/system/rc_app_setup.h"

using namespace tandem::rnic::host;
using namespace tandem::rnic::host::test_app;

namespace {

constexpr std::size_t kBuf = 1 << 20;
constexpr std::size_t kSrc = 0, kWriteIn = 256 << 10, kRecvIn = 512 << 10, kReadIn = 768 << 10;
constexpr uint32_t kWriteLen = 200000, kReadLen = 150000;
constexpr uint32_t kSendLens[3] = {100, 5000, 60000};
constexpr uint32_t kSendOff[3] = {1000, 20000, 70000};

uint8_t pattern(uint32_t seed, std::size_t i) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed * 40503u;
  x ^= x >> 13;
  return static_cast<uint8_t>(x ^ (x >> 7));
}

int poll_one(Cq* cq, ibv_wc* wc, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    int n = poll_cq(cq, 1, wc);
    if (n != 0) return n;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  g_prog = "rnic_host_app";
  if (argc != 8 && argc != 9) {
    std::fprintf(stderr,
                 "usage: %s verify|stream|sink SOCKET DIR NAME PEER_NAME SEED PEER_OVERLAY_IP [LOCAL_VNIC_IP]\n",
                 argv[0]);
    return 2;
  }
  const std::string mode = argv[1], sock = argv[2], dir = argv[3], name = argv[4], peer_name = argv[5];
  const uint32_t seed = static_cast<uint32_t>(std::atoi(argv[6]));
  in_addr peer_ip{};
  if (inet_pton(AF_INET, argv[7], &peer_ip) != 1) die(2, "bad peer IP");

  // With LOCAL_VNIC_IP the application binds itself to that vNIC of the port.
  const RcApp app = open_rc_app(sock, name, kBuf, 64, 2, argc == 9 ? argv[8] : nullptr);
  Context* ctx = app.ctx;
  Pd* pd = app.pd;
  uint8_t* buf = app.buf;
  Mr* mr = app.mr;
  Cq* cq = app.cq;
  Qp* qp = app.qp;
  for (std::size_t i = 0; i < kBuf; ++i) buf[i] = i < kWriteIn ? pattern(seed, i) : 0;

  to_init(qp);
  // Receives first (in INIT), so the peer's SENDs find them.
  for (int i = 0; i < 3; ++i) {
    ibv_sge s{reinterpret_cast<uintptr_t>(buf + kRecvIn + i * 65536), 65536, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = 100 + i;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (mode == "verify" && post_recv(qp, &wr, &bad)) die(2, "post_recv");
  }

  const Peer peer = exchange(dir, name, peer_name, qp, mr, buf);
  connect_rc(qp, peer, peer_ip, 14);
  touch(dir + "/" + name + ".ready");
  if (!wait_file(dir + "/" + peer_name + ".ready", 30)) die(2, "peer never reached RTS");

  auto post = [&](ibv_wr_opcode op, std::size_t off, uint32_t len, uint64_t raddr, uint64_t id) {
    ibv_sge s{reinterpret_cast<uintptr_t>(buf + off), len, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = peer.rkey;
    ibv_send_wr* bad = nullptr;
    return post_send(qp, &wr, &bad);
  };

  if (mode == "sink") {
    std::printf("%s: connected (QP 0x%x), waiting\n", name.c_str(), qp->qp_num);
    std::fflush(stdout);
    wait_file(dir + "/" + name + ".stop", 60);
    return 0;
  }
  if (mode == "stream") {
    uint64_t done = 0, posted = 0;
    for (;;) {
      while (posted - done < 32) {
        if (post(IBV_WR_RDMA_WRITE, kSrc, 65536, peer.addr + kWriteIn, posted)) die(1, "post_send");
        ++posted;
      }
      ibv_wc wc[16];
      int n = poll_cq(cq, 16, wc);
      for (int i = 0; i < n; ++i)
        if (wc[i].status != IBV_WC_SUCCESS) die(1, "stream: completion error " + std::to_string(wc[i].status));
      if (n > 0 && done == 0) {
        std::printf("%s: streaming\n", name.c_str());
        std::fflush(stdout);
        touch(dir + "/" + name + ".streaming");
      }
      done += static_cast<uint64_t>(n > 0 ? n : 0);
    }
  }

  // WRITE, then SENDs, then READ. The peer's SENDs may complete our RECVs
  // at any point in between, so every wait also collects RECVs.
  int recvs = 0;
  uint32_t recv_len[3] = {};
  auto wait_for = [&](ibv_wc_opcode op, int count, const char* what) {
    int got = 0;
    while (got < count) {
      ibv_wc wc{};
      if (poll_one(cq, &wc, 20) != 1) die(1, std::string("no completion for ") + what);
      if (wc.status != IBV_WC_SUCCESS)
        die(1, std::string(what) + ": completion status " + std::to_string(wc.status) + " opcode " +
                   std::to_string(wc.opcode));
      if (wc.opcode == IBV_WC_RECV && wc.wr_id >= 100 && wc.wr_id < 103) {
        recv_len[wc.wr_id - 100] = wc.byte_len;
        ++recvs;
        if (op == IBV_WC_RECV) ++got;
      } else if (wc.opcode == op) {
        ++got;
      } else {
        die(1, std::string(what) + ": unexpected completion opcode " + std::to_string(wc.opcode));
      }
    }
  };
  if (post(IBV_WR_RDMA_WRITE, kSrc, kWriteLen, peer.addr + kWriteIn, 1)) die(1, "post WRITE");
  wait_for(IBV_WC_RDMA_WRITE, 1, "WRITE");
  for (int i = 0; i < 3; ++i)
    if (post(IBV_WR_SEND, kSendOff[i], kSendLens[i], 0, 10 + i)) die(1, "post SEND");
  wait_for(IBV_WC_SEND, 3, "SEND");
  if (post(IBV_WR_RDMA_READ, kReadIn, kReadLen, peer.addr + kSrc, 20)) die(1, "post READ");
  wait_for(IBV_WC_RDMA_READ, 1, "READ");
  if (recvs < 3) wait_for(IBV_WC_RECV, 3 - recvs, "RECV");
  const uint32_t peer_seed = static_cast<uint32_t>(std::atoi(argv[6])) ^ 1;  // the test pairs seeds 2k, 2k+1
  int bad = 0;
  for (uint32_t i = 0; i < kReadLen; ++i)
    if (buf[kReadIn + i] != pattern(peer_seed, kSrc + i)) ++bad;
  if (bad) die(1, "READ data differs in " + std::to_string(bad) + " bytes");
  for (int m = 0; m < 3; ++m) {
    if (recv_len[m] != kSendLens[m]) die(1, "RECV " + std::to_string(m) + " byte_len " + std::to_string(recv_len[m]));
    for (uint32_t i = 0; i < kSendLens[m]; ++i)
      if (buf[kRecvIn + m * 65536 + i] != pattern(peer_seed, kSendOff[m] + i)) ++bad;
  }
  if (bad) die(1, "SEND data differs in " + std::to_string(bad) + " bytes");
  // The peer's WRITE completed before its SENDs (same QP, in order): placed.
  for (uint32_t i = 0; i < kWriteLen; ++i)
    if (buf[kWriteIn + i] != pattern(peer_seed, kSrc + i)) ++bad;
  if (bad) die(1, "WRITE data differs in " + std::to_string(bad) + " bytes");
  touch(dir + "/" + name + ".done");
  wait_file(dir + "/" + peer_name + ".done", 30);  // keep serving the peer's READ until it is done
  std::printf("%s: WRITE %u B, SEND %u+%u+%u B, READ %u B verified\n", name.c_str(), kWriteLen, kSendLens[0],
              kSendLens[1], kSendLens[2], kReadLen);
  destroy_qp(qp);
  destroy_cq(cq);
  dereg_mr(mr);
  free_buf(ctx, buf);
  dealloc_pd(pd);
  close_device(ctx);
  return 0;
}
