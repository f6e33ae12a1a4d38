// Several servers per port (tandem-rnic --lcores): the listening server
// places each application on a server of the port (ServerConfig::place,
// adopt), every object of it lives there, its QPNs come from that server's
// slot range (so the steering of rnic/port/qp_steering.h finds its lcore),
// and the port's fair shares are one account over all servers.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "rnic/host/host_server.h"
#include "rnic/host/verbs.h"
#include "rnic/port/qp_steering.h"
#include "server_thread.h"
#include "verbs_helpers.h"

using namespace tandem::rnic;
using namespace tandem::rnic::host;

namespace {

// Two servers, as a 2-lcore worker has them, polled by one thread.
struct Port {
  explicit Port(ResourceLimits limits = {}) : dir(test::make_temp_dir()) {
    path = dir + "/rnic0.sock";
    quotas = std::make_shared<TenantQuotas>(limits);
    const port::QpShards shards(2);
    for (uint32_t k = 0; k < 2; ++k) {
      ServerConfig c;
      c.socket_path = path;
      c.max_qps = shards.slots_per_lcore();
      c.qp_slot_base = shards.slot_base(k);
      c.listen = k == 0;
      c.quotas = quotas;
      if (k == 0) c.place = [this] { return placed_on_1 ? servers[1].get() : servers[0].get(); };
      servers[k] = std::make_unique<HostServer>(c);
    }
    thread = std::thread([this] {
      uint64_t now = 0;
      while (!stop) {
        {
          std::lock_guard l(mu);
          now += 1'000'000;
          for (auto& s : servers) s->poll(now);
        }
        std::this_thread::yield();
      }
    });
  }
  ~Port() {
    stop = true;
    thread.join();
    for (auto& s : servers) s.reset();
    std::filesystem::remove_all(dir);
  }
  template <class F>
  auto with(F&& f) {
    std::lock_guard l(mu);
    return f(*servers[0], *servers[1]);
  }

  std::string dir, path;
  std::shared_ptr<TenantQuotas> quotas;
  std::unique_ptr<HostServer> servers[2];
  std::atomic<bool> placed_on_1{true};
  std::mutex mu;
  std::atomic<bool> stop{false};
  std::thread thread;
};

}  // namespace

TEST_CASE("an application placed on the port's second server lives there, with QPNs from its slot range") {
  Port p;
  test::App a(p.path);  // placed on server 1
  p.placed_on_1 = false;
  test::App b(p.path);  // placed on server 0
  const port::QpShards shards(2);
  CHECK(shards.owner(a.qp->qp_num) == 1);
  CHECK((a.qp->qp_num & 0xFFFF) >= shards.slot_base(1));
  CHECK(shards.owner(b.qp->qp_num) == 0);
  p.with([&](HostServer& s0, HostServer& s1) {
    CHECK(s0.app_count() == 1);
    CHECK(s1.app_count() == 1);
    CHECK(s1.qp_count() == 1);
    CHECK(s1.qp_info(a.qp->qp_num) != nullptr);  // the QP is server 1's, not 0's
    CHECK(s0.qp_info(a.qp->qp_num) == nullptr);
    CHECK(s0.qp_info(b.qp->qp_num) != nullptr);
    CHECK(s1.qp_info(b.qp->qp_num) == nullptr);
    return 0;
  });
  // Work on it reaches server 1's fast half: a posted receive is there to fetch.
  ibv_recv_wr wr{};
  ibv_sge sge = a.sge(0, 64);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  REQUIRE(test::to_rts(a.qp, 2) == 0);
  REQUIRE(post_recv(a.qp, &wr, &bad) == 0);
  CHECK(p.with([&](HostServer&, HostServer& s1) { return s1.recv_queued(a.qp->qp_num); }) == 1);
}

TEST_CASE("the port's fair shares count every server's applications against one vNIC account") {
  ResourceLimits lim;
  lim.per_vnic[resource_index(Resource::kQps)] = 1;
  Port p(lim);
  test::App a(p.path);  // server 1: the vNIC's one QP
  p.placed_on_1 = false;
  DeviceAttr attr;
  attr.name = "second";
  Context* ctx = open_device(p.path.c_str(), attr);  // server 0
  REQUIRE(ctx != nullptr);
  Pd* pd = alloc_pd(ctx);
  Cq* cq = create_cq(ctx, 16);
  REQUIRE((pd != nullptr && cq != nullptr));
  QpInitAttr init;
  init.send_cq = init.recv_cq = cq;
  init.cap.max_send_wr = init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  CHECK(create_qp(pd, &init) == nullptr);  // over the port's limit, though server 0 has none
  destroy_cq(cq);
  dealloc_pd(pd);
  close_device(ctx);
}
