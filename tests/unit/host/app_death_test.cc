#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <vector>

#include "rnic/host/host_server.h"
#include "rnic/host/verbs.h"
#include "server_thread.h"
#include "verbs_helpers.h"

using namespace tandem::rnic::host;

namespace {

// The child: a verbs application that sets up QPs, queues work and then is
// killed without cleaning up. Reports progress on `out`; never returns.
[[noreturn]] void run_child(const std::string& path, int out, int qps) {
  Context* ctx = open_device(path.c_str());
  if (ctx == nullptr) _exit(10);
  Pd* pd = alloc_pd(ctx);
  auto* buf = static_cast<uint8_t*>(alloc_buf(ctx, 1 << 16));
  Mr* mr = buf != nullptr ? reg_mr(pd, buf, 1 << 16, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  Cq* cq = create_cq(ctx, 256);
  if (pd == nullptr || mr == nullptr || cq == nullptr) _exit(11);
  for (int i = 0; i < qps; ++i) {
    QpInitAttr init;
    init.send_cq = cq;
    init.recv_cq = cq;
    init.cap.max_send_wr = 8;
    init.cap.max_recv_wr = 8;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    Qp* qp = create_qp(pd, &init);
    if (qp == nullptr || test::to_rts(qp, 1) != 0) _exit(12);
    ibv_sge s{reinterpret_cast<uintptr_t>(buf), 64, mr->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_send_wr* bad;
    if (post_send(qp, &wr, &bad) != 0) _exit(13);
  }
  char ready = 'r';
  if (write(out, &ready, 1) != 1) _exit(14);
  for (;;) pause();  // mid-way: QPs live, WQEs queued, until SIGKILL
}

}  // namespace

TEST_CASE("an application process that dies mid-way has its QPs, CQs, MRs and mappings freed") {
  std::string dir = test::make_temp_dir();
  std::string path = dir + "/rnic0.sock";
  ServerConfig cfg;
  cfg.socket_path = path;
  HostServer server(cfg);
  constexpr int kQps = 8;
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(pipefd[0]);
    run_child(path, pipefd[1], kQps);
  }
  close(pipefd[1]);

  uint64_t now = 0;
  std::set<uint32_t> created;
  std::set<uint32_t> destroyed;
  bool detached = false;
  bool died_flag = false;
  auto drain = [&] {
    HostEvent e;
    while (server.next_event(&e)) {
      if (e.kind == HostEventKind::kQpCreated) created.insert(e.qpn);
      if (e.kind == HostEventKind::kQpDestroyed && e.app_died) destroyed.insert(e.qpn);
      if (e.kind == HostEventKind::kAppDetached) {
        detached = true;
        died_flag = e.app_died;
      }
    }
  };
  // Serve the child until it says it is ready (its calls block on our answers).
  bool ready = false;
  for (int i = 0; i < 200000 && !ready; ++i) {
    server.poll(now += 1000);
    drain();
    pollfd p{pipefd[0], POLLIN, 0};
    ready = ::poll(&p, 1, 0) == 1;
    if (!ready) usleep(50);
  }
  REQUIRE(ready);
  CHECK(server.qp_count() == kQps);
  CHECK(server.cq_count() == 1);
  CHECK(server.mr_count() == 1);
  CHECK(server.app_count() == 1);
  AppInfo info[2];
  REQUIRE(server.list_apps(info) == 1);
  CHECK(info[0].pid == static_cast<uint32_t>(child));  // the kernel's word, not the app's
  CHECK(info[0].qps == kQps);
  std::size_t mapped_alive = server.memory().mapped_bytes;
  CHECK(mapped_alive > 0);
  // Its WQEs are visible to the worker while it lives.
  uint32_t ready_qpns[kQps * 2];
  CHECK(server.ready_qps(ready_qpns) == kQps);

  REQUIRE(kill(child, SIGKILL) == 0);
  int wstatus = 0;
  REQUIRE(waitpid(child, &wstatus, 0) == child);
  CHECK(WIFSIGNALED(wstatus));

  for (int i = 0; i < 100000 && !detached; ++i) {
    server.poll(now += 1000);
    drain();
    if (!detached) usleep(50);
  }
  REQUIRE(detached);
  CHECK(died_flag);
  CHECK(created.size() == kQps);
  CHECK(destroyed == created);  // the transport learns exactly which QPs to flush
  CHECK(server.qp_count() == 0);
  CHECK(server.cq_count() == 0);
  CHECK(server.mr_count() == 0);
  CHECK(server.app_count() == 0);
  CHECK(server.counters().apps_detached == 1);
  for (uint32_t q : created) CHECK(server.qp_info(q) == nullptr);
  // Mappings are retired, then unmapped at a later poll.
  CHECK(server.memory().mapped_bytes == 0);
  server.poll(now += 1000);
  CHECK(server.memory().retired_bytes == 0);
  close(pipefd[0]);
  std::filesystem::remove_all(dir);
}

TEST_CASE("an explicit destroy_qp frees the QP and reports it as not died") {
  test::ServerThread st;
  test::App app(st.path);
  uint32_t qpn = app.qp->qp_num;
  REQUIRE(destroy_qp(app.qp) == 0);
  app.qp = nullptr;
  st.with([&](HostServer& s) {
    CHECK(s.qp_info(qpn) == nullptr);
    HostEvent e;
    bool seen = false;
    while (s.next_event(&e)) {
      if (e.kind == HostEventKind::kQpDestroyed && e.qpn == qpn) seen = !e.app_died;
    }
    CHECK(seen);
  });
}
