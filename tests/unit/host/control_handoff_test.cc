// The control thread / lcore split of HostServer: a control thread serves the
// socket (serve_control) while a stand-in lcore applies its messages
// (apply_control) and probes the fast path, as the worker does.
#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "rnic/host/host_server.h"
#include "rnic/host/verbs.h"
#include "server_thread.h"
#include "verbs_helpers.h"

using namespace tandem::rnic::host;
using namespace std::chrono_literals;

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// A device mapper that blocks map() until opened: a registration that takes
// as long as the test wants (pinning gigabytes on a real NIC).
class GateMapper final : public DeviceMapper {
 public:
  void map(uint8_t*, uint64_t, bool) noexcept override {
    maps.fetch_add(1);
    std::unique_lock l(mu_);
    cv_.wait(l, [&] { return open_; });
  }
  void unmap(uint8_t*) noexcept override {
    unmap_at.store(now_ns());
    unmaps.fetch_add(1);
  }
  void open() {
    std::lock_guard l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  std::atomic<int> maps{0};
  std::atomic<int> unmaps{0};
  std::atomic<uint64_t> unmap_at{0};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// A control thread and an lcore thread around one HostServer. The lcore
// probes one (QP, rkey, address) each iteration and records the events.
class Threaded {
 public:
  explicit Threaded(DeviceMapper* mapper, std::function<bool(uint32_t)> in_flight = {})
      : dir_(test::make_temp_dir()) {
    path = dir_ + "/rnic0.sock";
    ServerConfig c;
    c.socket_path = path;
    c.mapper = mapper;
    c.mr_in_flight = std::move(in_flight);
    server_ = std::make_unique<HostServer>(c);
    server_->set_threaded(true);
    control_ = std::thread([this] {
      while (!stop_) server_->serve_control(now_ns(), 1);
    });
    lcore_ = std::thread([this] { lcore(); });
  }
  ~Threaded() {
    stop_ = true;
    server_->stop_control();
    control_.join();
    lcore_.join();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Waits for the lcore to go round twice, then: is the probed rkey usable?
  bool visible() {
    uint64_t i = iterations.load();
    while (iterations.load() < i + 2) std::this_thread::yield();
    return probe_ok.load();
  }
  std::vector<HostEvent> events() {
    std::lock_guard l(mu_);
    return events_;
  }

  std::string path;
  std::atomic<uint32_t> probe_qpn{0}, probe_rkey{0};
  std::atomic<uint64_t> probe_addr{0};
  std::atomic<uint32_t> error_qpn{0};  // the lcore moves it to ERR (as after retries exhausted)
  std::atomic<uint64_t> iterations{0};
  std::atomic<bool> probe_ok{false};

 private:
  void lcore() {
    while (!stop_) {
      server_->apply_control(now_ns());
      if (uint32_t q = error_qpn.exchange(0)) server_->qp_error(q);
      probe_ok = probe_qpn != 0 && server_->translate_remote(probe_qpn, probe_rkey, probe_addr, 64,
                                                             IBV_ACCESS_REMOTE_WRITE) != nullptr;
      {
        std::lock_guard l(mu_);
        for (HostEvent e; server_->next_event(&e);) events_.push_back(e);
      }
      iterations.fetch_add(1);
      std::this_thread::yield();
    }
  }

  std::string dir_;
  std::unique_ptr<HostServer> server_;
  std::atomic<bool> stop_{false};
  std::thread control_, lcore_;
  std::mutex mu_;
  std::vector<HostEvent> events_;
};

constexpr std::size_t kBuf = 1 << 20;

}  // namespace

TEST_CASE("a registration stuck in the device mapper stalls neither the lcore nor the MR's visibility rules") {
  GateMapper mapper;
  Threaded t(&mapper);
  DeviceAttr attr;
  attr.name = "gate";
  Context* ctx = open_device(t.path.c_str(), attr);
  REQUIRE(ctx != nullptr);
  Pd* pd = alloc_pd(ctx);
  Cq* cq = create_cq(ctx, 16);
  QpInitAttr init;
  init.send_cq = cq;
  init.recv_cq = cq;
  Qp* qp = create_qp(pd, &init);
  REQUIRE(qp != nullptr);
  REQUIRE(test::to_rts(qp, 2) == 0);
  auto* buf = static_cast<uint8_t*>(alloc_buf(ctx, kBuf));
  REQUIRE(buf != nullptr);
  t.probe_qpn = qp->qp_num;
  t.probe_rkey = 0 << 8 | 1;  // the first MR: slot 0, generation 1
  t.probe_addr = reinterpret_cast<uint64_t>(buf);

  auto reg = std::async(std::launch::async, [&] { return reg_mr(pd, buf, kBuf, test::kAllAccess); });
  while (mapper.maps.load() == 0) std::this_thread::sleep_for(1ms);
  // The control thread sits in the mapper: the lcore keeps iterating, the MR is not usable.
  const uint64_t before = t.iterations.load();
  std::this_thread::sleep_for(50ms);
  CHECK(t.iterations.load() > before + 10);
  CHECK_FALSE(t.visible());
  CHECK(reg.wait_for(0ms) == std::future_status::timeout);

  mapper.open();
  Mr* mr = reg.get();
  REQUIRE(mr != nullptr);
  CHECK(mr->rkey == (0 << 8 | 1));
  // The reply came after the lcore applied it: usable at once.
  CHECK(t.visible());

  REQUIRE(dereg_mr(mr) == 0);
  // dereg_mr returned: the lcore already refuses the rkey.
  CHECK_FALSE(t.visible());
  REQUIRE(destroy_qp(qp) == 0);
  REQUIRE(destroy_cq(cq) == 0);
  REQUIRE(dealloc_pd(pd) == 0);
  close_device(ctx);
}

TEST_CASE("a deregistered MR's pages and slot go once the lcore has acted on it and the device holds none of it") {
  GateMapper mapper;
  mapper.open();
  std::atomic<bool> held{true};     // the device still has payloads of the MR (zero-copy mbufs)
  std::atomic<uint32_t> asked{UINT32_MAX};
  Threaded t(&mapper, [&](uint32_t i) {
    asked = i;
    return held.load();
  });
  test::App app(t.path);
  t.probe_qpn = app.qp->qp_num;
  t.probe_rkey = app.mr->rkey;
  t.probe_addr = reinterpret_cast<uint64_t>(app.buf);
  REQUIRE(test::to_rts(app.qp, 2) == 0);
  CHECK(t.visible());
  REQUIRE(mapper.maps.load() == 1);
  const uint32_t slot = app.mr->lkey >> 8;
  REQUIRE(dereg_mr(app.mr) == 0);
  app.mr = nullptr;
  CHECK_FALSE(t.visible());
  // No fixed grace: only the device's hold keeps it, however long.
  std::this_thread::sleep_for(150ms);
  CHECK(mapper.unmaps.load() == 0);
  CHECK(asked.load() == slot);
  // Its slot is not handed out meanwhile (the device's count is per slot).
  Mr* other = reg_mr(app.pd, app.buf, 4096, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(other != nullptr);
  CHECK((other->lkey >> 8) != slot);
  held = false;
  for (int i = 0; i < 2000 && mapper.unmaps.load() == 0; ++i) std::this_thread::sleep_for(1ms);
  CHECK(mapper.unmaps.load() == 1);
  REQUIRE(dereg_mr(other) == 0);
}

TEST_CASE("control changes reach the lcore in order, and modify_qp answers from the lcore's QP state") {
  Threaded t(nullptr);
  test::App app(t.path);
  const uint32_t qpn = app.qp->qp_num;
  REQUIRE(test::to_rts(app.qp, 2) == 0);
  // The lcore moves the QP to ERR on its own (retries exhausted): the control
  // half must not answer RTS -> RTS from a stale copy.
  t.error_qpn = qpn;
  while (t.error_qpn.load() != 0) std::this_thread::yield();
  t.visible();  // one more lcore round
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  CHECK(modify_qp(app.qp, &a, IBV_QP_STATE) == static_cast<int>(Status::kBadState));
  a.qp_state = IBV_QPS_RESET;
  CHECK(modify_qp(app.qp, &a, IBV_QP_STATE) == 0);
  REQUIRE(destroy_qp(app.qp) == 0);
  app.qp = nullptr;

  std::vector<std::pair<HostEventKind, ibv_qp_state>> seen;
  for (const HostEvent& e : t.events()) {
    if (e.qpn == qpn) seen.emplace_back(e.kind, e.state);
  }
  const std::vector<std::pair<HostEventKind, ibv_qp_state>> want = {
      {HostEventKind::kQpCreated, IBV_QPS_RESET},      {HostEventKind::kQpStateChanged, IBV_QPS_INIT},
      {HostEventKind::kQpStateChanged, IBV_QPS_RTR},   {HostEventKind::kQpStateChanged, IBV_QPS_RTS},
      {HostEventKind::kQpStateChanged, IBV_QPS_ERR},   {HostEventKind::kQpStateChanged, IBV_QPS_RESET},
      {HostEventKind::kQpDestroyed, IBV_QPS_RESET},
  };
  CHECK(seen == want);
}

TEST_CASE("SRQs follow the split: the lcore gets them in order with their QPs, and query_qp answers from its state") {
  Threaded t(nullptr);
  test::App app(t.path);
  Srq* srq = create_srq(app.pd, 8, 1);
  REQUIRE(srq != nullptr);
  QpInitAttr init;
  init.send_cq = app.cq;
  init.recv_cq = app.cq;
  init.srq = srq;
  Qp* qp = create_qp(app.pd, &init);
  REQUIRE(qp != nullptr);
  REQUIRE(test::to_rts(qp, 2) == 0);
  CHECK(destroy_srq(srq) == static_cast<int>(Status::kBusy));  // the control half's reference count
  REQUIRE(query_qp_state(qp) == 0);
  CHECK(qp->state == IBV_QPS_RTS);
  t.error_qpn = qp->qp_num;  // the lcore's own move to ERR: only its state knows
  while (t.error_qpn.load() != 0) std::this_thread::yield();
  t.visible();
  REQUIRE(query_qp_state(qp) == 0);
  CHECK(qp->state == IBV_QPS_ERR);
  const uint32_t qpn = qp->qp_num, handle = srq->handle;
  REQUIRE(destroy_qp(qp) == 0);
  REQUIRE(destroy_srq(srq) == 0);

  // The worker creates the transport's SRQ before a QP on it, and destroys it after.
  std::vector<HostEventKind> seen;
  for (const HostEvent& e : t.events()) {
    if ((e.kind == HostEventKind::kSrqCreated || e.kind == HostEventKind::kSrqDestroyed) && e.srq == handle)
      seen.push_back(e.kind);
    if ((e.kind == HostEventKind::kQpCreated || e.kind == HostEventKind::kQpDestroyed) && e.qpn == qpn)
      seen.push_back(e.kind);
  }
  const std::vector<HostEventKind> want = {HostEventKind::kSrqCreated, HostEventKind::kQpCreated,
                                           HostEventKind::kQpDestroyed, HostEventKind::kSrqDestroyed};
  CHECK(seen == want);
}
