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

#include "one_device.h"

namespace th = tandem::rnic::host;

TEST_CASE("a nonblocking completion channel gives EAGAIN, and async_fd is a quiet pollable fd") {
  th::ServerConfig config;
  config.vnic_ips = {0xC0A80701};
  th::test::ServerThread st(config);
  th::test::OneDevice dev(st, "tandem_T_v1", 0xC0A80701);
  ibv_context* ctx = dev.ctx;

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
  dev.ctx = nullptr;
  unsetenv("TANDEM_DEVICES");
}
