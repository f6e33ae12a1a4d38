#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "rnic/host/host_protocol.h"
#include "rnic/host/host_server.h"
#include "rnic/host/unix_channel.h"
#include "rnic/host/verbs.h"
#include "server_thread.h"
#include "verbs_helpers.h"

using namespace tandem::rnic::host;
namespace test = tandem::rnic::host::test;

TEST_CASE("random WQEs written straight into the SQ never yield memory outside the MR") {
  test::ServerThread st;
  test::App app(st.path, 16, 16);
  uint8_t* mr_base = nullptr;
  uint64_t mr_len = 0;
  st.with([&](HostServer& s) {
    HostEvent e;
    while (s.next_event(&e)) {
      if (e.kind == HostEventKind::kMrRegistered && e.lkey == app.mr->lkey) {
        mr_base = e.addr;
        mr_len = e.length;
      }
    }
  });
  REQUIRE(mr_base != nullptr);
  std::mt19937_64 rng(42);
  QpQueueLayout layout = qp_queue_layout(16, 16);
  auto* ctrl = reinterpret_cast<RingControl*>(app.qp->queue_memory.data() + layout.sq_control);
  auto* ring = reinterpret_cast<SendWqe*>(app.qp->queue_memory.data() + layout.sq_entries);
  std::size_t handed = 0;
  std::size_t errors = 0;
  for (int round = 0; round < 200; ++round) {
    REQUIRE(test::to_rts(app.qp, 1) == 0);
    uint32_t prod = ctrl->producer.load();
    uint32_t k = 1 + static_cast<uint32_t>(rng() % 16);
    for (uint32_t i = 0; i < k; ++i) {
      SendWqe& w = ring[(prod + i) & 15];
      for (auto* p = reinterpret_cast<uint8_t*>(&w); p < reinterpret_cast<uint8_t*>(&w + 1); ++p) {
        *p = static_cast<uint8_t>(rng());
      }
      // Mostly plausible values, so validation is exercised past the first check.
      w.opcode = static_cast<uint8_t>(rng() % 8);
      w.num_sge = static_cast<uint8_t>(rng() % 8);
      w.send_flags = static_cast<uint32_t>(rng() % 16);
      w.inline_len = static_cast<uint16_t>(rng() % 128);
      for (auto& s : w.sge) {
        if (rng() % 4 != 0) s.lkey = app.mr->lkey;
        s.offset = rng() % 2 ? rng() % (mr_len + 100) : rng();
        s.length = static_cast<uint32_t>(rng() % 2 ? rng() % 4096 : rng());
      }
    }
    ctrl->producer.store(prod + k, std::memory_order_release);
    st.with([&](HostServer& s) {
      std::vector<SendWork> out(4);
      for (int guard = 0; guard < 64; ++guard) {
        std::size_t n = s.fetch_send(app.qp->qp_num, out);
        for (std::size_t i = 0; i < n; ++i) {
          const SendWork& w = out[i];
          REQUIRE(w.num_sge <= kMaxSge);
          REQUIRE(w.inline_len <= kMaxInline);
          for (uint32_t j = 0; j < w.num_sge && w.inline_len == 0; ++j) {
            REQUIRE(w.sge[j].addr >= mr_base);
            REQUIRE(w.sge[j].addr + w.sge[j].length <= mr_base + mr_len);
          }
          CHECK(s.complete_send(app.qp->qp_num, w, IBV_WC_SUCCESS));
        }
        handed += n;
        if (s.send_queued(app.qp->qp_num) == 0) break;
      }
      CHECK(s.send_queued(app.qp->qp_num) == 0);
    });
    ibv_wc wc[64];
    int got;
    while ((got = poll_cq(app.cq, 64, wc)) > 0) {
      for (int i = 0; i < got; ++i) errors += wc[i].status != IBV_WC_SUCCESS;
    }
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RESET;
    REQUIRE(modify_qp(app.qp, &a, IBV_QP_STATE) == 0);
  }
  CHECK(handed > 0);   // some random WQEs were valid...
  CHECK(errors > 0);   // ...and many were not
  WARN("random WQEs: " << handed << " valid, " << errors << " error or flush completions");
}

TEST_CASE("random control messages from a connected client never crash the worker") {
  std::string dir = test::make_temp_dir();
  ServerConfig cfg;
  cfg.socket_path = dir + "/rnic0.sock";
  HostServer server(cfg);
  std::mt19937_64 rng(7);
  uint64_t now = 0;
  int answered = 0;
  for (int conn = 0; conn < 20; ++conn) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strcpy(sa.sun_path, cfg.socket_path.c_str());
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    // A proper hello first, so the random requests reach the handlers.
    Request hello{};
    hello.hdr.magic = kProtocolMagic;
    hello.hdr.type = static_cast<uint16_t>(MsgType::kHello);
    hello.body.hello.version_min = 1;
    hello.body.hello.version_max = 1;
    ShmRegion page;
    REQUIRE(ShmRegion::create("t", sizeof(DoorbellPage), false, &page) == Status::kOk);
    int pfd = page.fd();
    REQUIRE(send_message(fd, &hello, sizeof hello, &pfd, 1) == sizeof hello);
    Reply rep{};
    int fds[kMaxFdsPerMessage];
    std::size_t nfds = 0;
    // Polls until the worker answered (or hung up): accept and serve take separate polls.
    auto answer = [&] {
      for (int k = 0; k < 10; ++k) {
        server.poll(now += 1000);
        ssize_t n = recv_message(fd, &rep, sizeof rep, fds, kMaxFdsPerMessage, &nfds, true);
        if (n != -EAGAIN) return n;
      }
      return ssize_t{-EAGAIN};
    };
    REQUIRE(answer() == sizeof rep);
    for (std::size_t i = 0; i < nfds; ++i) close(fds[i]);
    REQUIRE(rep.hdr.status == 0);
    for (int i = 0; i < 200; ++i) {
      Request req{};
      for (auto* p = reinterpret_cast<uint8_t*>(&req.body);
           p < reinterpret_cast<uint8_t*>(&req.body) + sizeof req.body; ++p) {
        *p = static_cast<uint8_t>(rng());
      }
      req.hdr.magic = kProtocolMagic;
      req.hdr.type = static_cast<uint16_t>(1 + rng() % 12);
      req.hdr.seq = static_cast<uint32_t>(i);
      // Sometimes attach a descriptor (a real memfd, or something that is not one).
      ShmRegion r;
      int sfd[2] = {-1, -1};
      std::size_t ns = 0;
      if (rng() % 2 != 0) {
        REQUIRE(ShmRegion::create("r", 1 + rng() % 70000, false, &r) == Status::kOk);
        sfd[ns++] = r.fd();
        if (rng() % 3 == 0) sfd[ns++] = fd;  // a socket where an eventfd belongs
      }
      if (send_message(fd, &req, sizeof req, sfd, ns) != sizeof req) break;
      ssize_t n = answer();
      if (n <= 0) break;  // dropped: fine, as long as the worker lives
      for (std::size_t j = 0; j < nfds; ++j) close(fds[j]);
      ++answered;
    }
    close(fd);
    server.poll(now += 1000);
  }
  // The port acts on what the worker tells it (here: drains it); then retired mappings go.
  for (int k = 0; k < 3; ++k) {
    for (HostEvent e; server.next_event(&e);) {
    }
    server.poll(now += 1000);
  }
  CHECK(answered > 100);
  CHECK(server.app_count() == 0);
  CHECK(server.qp_count() == 0);
  CHECK(server.cq_count() == 0);
  CHECK(server.mr_count() == 0);
  CHECK(server.memory().mapped_bytes == 0);
  CHECK(server.memory().retired_bytes == 0);
  std::filesystem::remove_all(dir);
}
