#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "rnic/host/host_server.h"
#include "rnic/host/verbs.h"
#include "server_thread.h"
#include "verbs_helpers.h"

using namespace tandem::rnic::host;

namespace {

constexpr char kFromWorker[] = "placed by the worker";

// A separate application process: posts a RECV and a signaled WRITE, then
// waits for both completions and checks what the worker placed. Its exit
// code is the verdict (0 = all good).
[[noreturn]] void run_app(const std::string& path) {
  Context* ctx = open_device(path.c_str());
  if (ctx == nullptr) _exit(10);
  Pd* pd = alloc_pd(ctx);
  auto* buf = static_cast<uint8_t*>(alloc_buf(ctx, 8192));
  if (pd == nullptr || buf == nullptr) _exit(11);
  for (int i = 0; i < 4096; ++i) buf[i] = static_cast<uint8_t>(i * 3);
  Mr* mr = reg_mr(pd, buf, 8192, test::kAllAccess);
  Cq* cq = create_cq(ctx, 16);
  if (mr == nullptr || cq == nullptr) _exit(12);
  QpInitAttr init;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.cap.max_send_wr = 8;
  init.cap.max_recv_wr = 8;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  Qp* qp = create_qp(pd, &init);
  if (qp == nullptr || test::to_rts(qp, 5) != 0) _exit(13);
  ibv_sge rs{reinterpret_cast<uintptr_t>(buf) + 4096, 4096, mr->lkey};
  ibv_recv_wr rwr{};
  rwr.wr_id = 1;
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ibv_recv_wr* rbad;
  if (post_recv(qp, &rwr, &rbad) != 0) _exit(14);
  ibv_sge ss{reinterpret_cast<uintptr_t>(buf), 4096, mr->lkey};
  ibv_send_wr swr{};
  swr.wr_id = 2;
  swr.opcode = IBV_WR_RDMA_WRITE;
  swr.sg_list = &ss;
  swr.num_sge = 1;
  swr.send_flags = IBV_SEND_SIGNALED;
  swr.wr.rdma.remote_addr = 0x10000;
  swr.wr.rdma.rkey = 0x77;
  ibv_send_wr* sbad;
  if (post_send(qp, &swr, &sbad) != 0) _exit(15);
  ibv_wc wc[2];
  int got = 0;
  for (int i = 0; i < 100000 && got < 2; ++i) {
    int r = poll_cq(cq, 2 - got, wc + got);
    if (r < 0) _exit(16);
    got += r;
    if (got < 2) usleep(50);
  }
  if (got != 2) _exit(17);
  for (auto& w : wc) {
    if (w.status != IBV_WC_SUCCESS) _exit(18);
    if (w.wr_id == 1 && (w.opcode != IBV_WC_RECV || w.byte_len != sizeof kFromWorker)) _exit(19);
    if (w.wr_id == 2 && w.opcode != IBV_WC_RDMA_WRITE) _exit(20);
  }
  if (std::memcmp(buf + 4096, kFromWorker, sizeof kFromWorker) != 0) _exit(21);
  _exit(0);
}

}  // namespace

TEST_CASE("a separate application process and the worker exchange WQEs and completions") {
  std::string dir = test::make_temp_dir();
  ServerConfig cfg;
  cfg.socket_path = dir + "/rnic0.sock";
  HostServer server(cfg);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) run_app(cfg.socket_path);

  uint64_t now = 0;
  SendWork send[2];
  RecvWork recv[2];
  std::size_t nsend = 0;
  std::size_t nrecv = 0;
  uint32_t qpn = 0;
  int wstatus = 0;
  pid_t done = 0;
  bool completed = false;
  bool write_payload_ok = false;
  for (int i = 0; i < 200000 && done == 0; ++i) {
    server.poll(now += 1000);
    uint32_t ready[4];
    std::size_t n = server.ready_qps(ready);
    for (std::size_t k = 0; k < n; ++k) {
      qpn = ready[k];
      nsend += server.fetch_send(qpn, std::span(send).subspan(nsend));
      nrecv += server.fetch_recv(qpn, std::span(recv).subspan(nrecv));
    }
    if (!completed && nsend == 1 && nrecv == 1) {
      write_payload_ok = send[0].length == 4096 && send[0].sge[0].addr[0] == 0 &&
                         send[0].sge[0].addr[100] == static_cast<uint8_t>(300) &&
                         send[0].rkey == 0x77 && send[0].remote_addr == 0x10000;
      std::memcpy(recv[0].sge[0].addr, kFromWorker, sizeof kFromWorker);
      CHECK(server.complete_recv(qpn, recv[0], IBV_WC_SUCCESS, sizeof kFromWorker, IBV_WC_RECV,
                                 false, 0, 5));
      CHECK(server.complete_send(qpn, send[0], IBV_WC_SUCCESS));
      completed = true;
    }
    done = waitpid(child, &wstatus, WNOHANG);
    if (done == 0) usleep(50);
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &wstatus, 0);
  }
  CHECK(completed);
  CHECK(write_payload_ok);
  REQUIRE(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);  // see run_app for what each code means
  std::filesystem::remove_all(dir);
}
