// A tenant application that holds many idle RC QPs on one tandem-rnic worker
// (the issue's 10,000 QPs per worker): attaches, creates COUNT QPs on one CQ,
// moves each through INIT, RTR (toward PEER_OVERLAY_IP, or the i-th of a
// comma-separated list, cyclically; remote QPN 0x10000+i)
// and RTS, writes DIR/NAME.ready with the count, then waits for DIR/NAME.stop
// (or to be killed: the worker must then free every one of them). With
// VNIC_IP it binds itself to that vNIC; DIR/NAME.times gets each QP's connect
// time (INIT to RTS, route wait included) in microseconds, one per line.
// Exit 0 = all created and connected, 2 = set-up failed (the message says
// which QP and step).
#include <arpa/inet.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/system/rc_app_setup.h"

using namespace tandem::rnic::host;
using namespace tandem::rnic::host::test_app;

int main(int argc, char** argv) {
  g_prog = "many_qps_app";
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: %s SOCKET DIR NAME COUNT PEER_OVERLAY_IP[,IP...] [VNIC_IP]\n", argv[0]);
    return 2;
  }
  const std::string sock = argv[1], dir = argv[2], name = argv[3];
  const long count = std::strtol(argv[4], nullptr, 10);
  std::vector<in_addr> peers;
  for (std::string rest = argv[5]; !rest.empty();) {
    const std::size_t comma = rest.find(',');
    in_addr a{};
    if (inet_pton(AF_INET, rest.substr(0, comma).c_str(), &a) != 1) die(2, "bad peer IP " + rest.substr(0, comma));
    peers.push_back(a);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  if (count < 1 || peers.empty()) die(2, "bad COUNT or peer IP");

  // The first QP comes with the app's PD, MR and CQ; the rest share them.
  const RcApp app = open_rc_app(sock, name, 1 << 16, 4, 1, argc == 7 ? argv[6] : nullptr);
  std::vector<Qp*> qps{app.qp};
  qps.reserve(static_cast<std::size_t>(count));
  QpInitAttr qi;
  qi.send_cq = app.cq;
  qi.recv_cq = app.cq;
  qi.cap.max_send_wr = 4;
  qi.cap.max_recv_wr = 4;
  qi.cap.max_send_sge = 1;
  qi.cap.max_recv_sge = 1;
  while (static_cast<long>(qps.size()) < count) {
    Qp* qp = create_qp(app.pd, &qi);
    if (!qp) die(2, "create_qp #" + std::to_string(qps.size()));
    qps.push_back(qp);
  }
  std::string times;
  for (std::size_t i = 0; i < qps.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    to_init(qps[i]);
    Peer p;
    p.qpn = 0x10000 + static_cast<uint32_t>(i);
    connect_rc(qps[i], p, peers[i % peers.size()], 14);
    times += std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::steady_clock::now() - t0).count()) + "\n";
  }
  touch(dir + "/" + name + ".times", times);
  touch(dir + "/" + name + ".ready", std::to_string(qps.size()));
  std::printf("%s: %zu QPs in RTS\n", name.c_str(), qps.size());
  std::fflush(stdout);
  wait_file(dir + "/" + name + ".stop", 600);
  return 0;
}
