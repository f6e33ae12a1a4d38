// Two RNIC ports wired back to back for unit tests of the port layer: each a
// real HostServer (Unix socket in a temp dir, tenant applications attach with
// rnic/host/verbs.h), a level-2 table, and PortWorker over FakeIo. One
// background thread plays both lcores: an iteration of A, of B, then the
// frames each port took are delivered to the other (or dropped/held as the
// test says), and the fake clock moves on. Tests inspect and change the ports
// between iterations with with(), and are the applications on their own thread.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/channel/messages.h"
#include "common/wire/entropy.h"
#include "fake_io.h"
#include "rnic/host/host_server.h"
#include "rnic/port/port_worker.h"

namespace tandem::rnic::port::test {

inline std::string temp_dir() {
  std::string t = (std::filesystem::temp_directory_path() / "tandem-port-XXXXXX").string();
  if (mkdtemp(t.data()) == nullptr) std::abort();
  return t;
}

// The DPU agent as the port logic sees it: records punts, says it is there.
class FakeAgent final : public AgentLink {
 public:
  void punt(const common::EntryKey& key, uint64_t) noexcept override { punts.push_back(key); }
  bool active() const noexcept override { return true; }
  const RnicChannel* channel() const noexcept override { return nullptr; }
  std::vector<common::EntryKey> punts;
};

inline constexpr uint32_t kVnic = 1;

struct NodeSpec {
  uint32_t underlay;
  uint32_t overlay;
  uint32_t peer_underlay;
  uint32_t peer_overlay;
  uint8_t mac_last;
};

// One port: its table, host interface, fake I/O and the port logic over them.
struct Node {
  Node(const std::string& dir, const std::string& name, const NodeSpec& s, bool dpu, Reliability mode)
      : spec(s), table(Level2TableConfig{256}) {
    socket = dir + "/" + name + ".sock";
    host::ServerConfig hc;
    hc.socket_path = socket;
    hc.max_qps = 64;
    host = std::make_unique<host::HostServer>(hc);
    PortConfig pc;
    pc.name = name;
    pc.underlay_ip = s.underlay;
    pc.underlay_mac = {2, 0, 0, 0, 0, s.mac_last};
    pc.yaml_vnics = {Vnic{kVnic, s.overlay, {2, 0, 0, 0, 1, s.mac_last}, 0, 0}};
    pc.mode = mode;
    pc.max_qps = 64;
    pw = std::make_unique<PortWorker<FakeIo>>(pc, table, *host, dpu ? &agent : nullptr, io);
    dpu_mode = dpu;
    if (!dpu) add_route();
  }

  // The egress entry toward the peer's vNIC and the ingress entry from it (what the YAML or
  // the agent installs).
  void add_route() {
    common::EgressAction a;
    a.underlay_src_ip = spec.underlay;
    a.underlay_dst_ip = spec.peer_underlay;
    a.dst_mac = {2, 0, 0, 0, 0, 0xfe};
    a.path_base_port = common::kEntropyPortBase;
    a.path_count = 4;
    REQUIRE(table.begin() == TableStatus::kOk);
    REQUIRE(table.put(common::make_egress_entry(common::egress_key(kVnic, spec.peer_overlay), a)) == TableStatus::kOk);
    common::IngressAction in;  // and what arrivals from the peer's underlay are (UD GRH sources)
    in.overlay_src_ip = spec.peer_overlay;
    in.overlay_dst_ip = spec.overlay;
    in.local_vnic_id = kVnic;
    REQUIRE(table.put(common::make_ingress_entry(common::ingress_key_vni(spec.peer_underlay, 0), in)) ==
            TableStatus::kOk);
    REQUIRE(table.commit() == TableStatus::kOk);
  }
  void remove_route() {
    REQUIRE(table.begin() == TableStatus::kOk);
    REQUIRE(table.del(common::egress_key(kVnic, spec.peer_overlay)) == TableStatus::kOk);
    REQUIRE(table.commit() == TableStatus::kOk);
  }

  uint32_t step(uint64_t now) {
    io.now = now;
    uint32_t work = pw->run_once(now);
    if (dpu_mode) work += pw->follow_agent(now);
    host->serve_control(now, 0);
    return work;
  }

  const WorkerCounters& k() const { return pw->counters(); }

  NodeSpec spec;
  std::string socket;
  Level2Table table;
  std::unique_ptr<host::HostServer> host;
  FakeIo io;
  FakeAgent agent;
  std::unique_ptr<PortWorker<FakeIo>> pw;
  bool dpu_mode = false;
};

struct PairOptions {
  bool dpu_a = false;  // A's routes come from the (fake) agent: none at start
  Reliability mode = Reliability::kIrn;
};

class Pair {
 public:
  static constexpr uint32_t kUnderlayA = 0x0A000001, kUnderlayB = 0x0A000002;
  static constexpr uint32_t kOverlayA = 0xC0A80701, kOverlayB = 0xC0A80702;

  explicit Pair(PairOptions o = {})
      : dir_(temp_dir()),
        a(dir_, "A", {kUnderlayA, kOverlayA, kUnderlayB, kOverlayB, 1}, o.dpu_a, o.mode),
        b(dir_, "B", {kUnderlayB, kOverlayB, kUnderlayA, kOverlayA, 2}, false, o.mode) {
    thread_ = std::thread([this] { run(); });
  }
  ~Pair() {
    stop();
    std::filesystem::remove_all(dir_);
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  void stop() {
    if (!thread_.joinable()) return;
    stop_ = true;
    thread_.join();
  }
  // After stop(): the loop runs again (the applications' teardown needs it).
  void start() {
    if (thread_.joinable()) return;
    stop_ = false;
    thread_ = std::thread([this] { run(); });
  }

  template <class F>
  auto with(F&& f) {
    std::lock_guard<std::mutex> g(mu_);
    return f();
  }
  // Iterates until pred() holds (checked under the lock); false after ~10 s.
  template <class P>
  bool wait_for(P&& pred) {
    for (int i = 0; i < 100000; ++i) {
      if (with(pred)) return true;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return false;
  }
  // Lets `n` more iterations run.
  void iterations(uint64_t n) {
    const uint64_t until = with([&] { return steps_ + n; });
    wait_for([&] { return steps_ >= until; });
  }

  // Under with(): the fake clock (both ports), and how far it moves per iteration.
  uint64_t now = 0;
  uint64_t step_ns = 1000;
  // Under with(): frames from A to B pass through this (false: lost).
  std::function<bool(FakeFrame&)> a_to_b;
  std::function<bool(FakeFrame&)> b_to_a;  // and from B to A
  bool deliver = true;  // false: frames wait on the wires

 private:
  void run() {
    int idle = 0;
    while (!stop_) {
      uint32_t work;
      {
        std::lock_guard<std::mutex> g(mu_);
        work = a.step(now) + b.step(now);
        if (deliver) {
          work += move(a.io, b.io, a_to_b);
          work += move(b.io, a.io, b_to_a);
        }
        now += step_ns;
        ++steps_;
      }
      idle = work ? 0 : idle + 1;
      if (idle > 64)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      else
        std::this_thread::yield();
    }
  }
  static uint32_t move(FakeIo& from, FakeIo& to, const std::function<bool(FakeFrame&)>& filter) {
    const uint32_t n = static_cast<uint32_t>(from.wire.size());
    for (FakeFrame* f : from.wire) {
      if (!filter || filter(*f)) to.inject(f->bytes.data(), f->len);
      from.release(f);
    }
    from.wire.clear();
    return n;
  }

  std::string dir_;

 public:
  Node a, b;

 private:
  std::mutex mu_;
  std::atomic<bool> stop_{false};
  uint64_t steps_ = 0;
  std::thread thread_;
};

}  // namespace tandem::rnic::port::test
