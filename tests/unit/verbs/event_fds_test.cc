// The pollable fds of the drop-in libibverbs as event loops use them (UCX puts
// both in its epoll set, nonblocking): a completion channel made nonblocking
// answers EAGAIN when no event is pending instead of blocking, and the
// context's async_fd is a real, quiet fd. Against a HostServer in this process.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "../host/server_thread.h"
#include "rnic/host/device_registry.h"

namespace th = tandem::rnic::host;

TEST_CASE("a nonblocking completion channel gives EAGAIN, and async_fd is a quiet pollable fd") {
  th::ServerConfig config;
  config.vnic_ips = {0xC0A80701};
  th::test::ServerThread st(config);
  const std::string dir = std::filesystem::path(st.path).parent_path() / "devices";
  th::DeviceRecord d;
  d.name = "tandem_T_v1";
  d.socket = st.path;
  d.vnic_ip = 0xC0A80701;
  d.pid = getpid();
  REQUIRE(th::write_device(dir, d).empty());
  setenv("TANDEM_DEVICES", dir.c_str(), 1);
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  REQUIRE(n == 1);
  ibv_context* ctx = ibv_open_device(list[0]);
  REQUIRE(ctx != nullptr);

  pollfd p{ctx->async_fd, POLLIN, 0};
  CHECK(ctx->async_fd >= 0);
  CHECK(poll(&p, 1, 0) == 0);  // nothing raised
  REQUIRE(fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0);
  ibv_async_event ev{};
  CHECK(ibv_get_async_event(ctx, &ev) == -1);
  CHECK(errno == EAGAIN);

  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  REQUIRE(ch != nullptr);
  CHECK((fcntl(ch->fd, F_GETFL) & O_NONBLOCK) == 0);  // blocking until the application says otherwise
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, ch, 0);
  REQUIRE(cq != nullptr);
  REQUIRE(ibv_req_notify_cq(cq, 0) == 0);
  REQUIRE(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0);
  ibv_cq* got = nullptr;
  void* cq_ctx = nullptr;
  errno = 0;
  CHECK(ibv_get_cq_event(ch, &got, &cq_ctx) == -1);
  CHECK(errno == EAGAIN);

  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_destroy_comp_channel(ch) == 0);
  CHECK(ibv_close_device(ctx) == 0);
  ibv_free_device_list(list);
  unsetenv("TANDEM_DEVICES");
}
