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
#include "rnic/port/commit_fanout.h"
#include "rnic/port/port_worker.h"
#include "rnic/table/rnic_channel.h"

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
  const LcoreView* view() const noexcept override { return nullptr; }
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
// lanes: DPU mode on two lcores (rnic/port/commit_fanout.h): the port logic is
// lcore 1's, reading through its LcoreAgent; lcore 0 is the channel's consumer
// (a real RnicChannel the test speaks to as the agent), modelled by its turn
// (lcore0_turn: tick, publish, its own view, the handed punts, the events out).
struct Node {
  Node(const std::string& dir, const std::string& name, const NodeSpec& s, bool dpu, Reliability mode,
       bool lanes = false)
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
    if (!lanes) pc.yaml_vnics = {Vnic{kVnic, s.overlay, {2, 0, 0, 0, 1, s.mac_last}, 0, 0}};  // lanes: the agent's
    pc.mode = mode;
    pc.max_qps = 64;
    if (lanes) {
      fanout = std::make_unique<CommitFanout>(table, 2);
      RnicChannelConfig cc;
      cc.readers = fanout.get();
      ch = std::make_unique<RnicChannel>(table, cc);
      lane0 = std::make_unique<LcoreAgent>(*fanout, 0, nullptr);
      lane1 = std::make_unique<LcoreAgent>(*fanout, 1, nullptr);
      common::HelloMsg h;
      h.agent_instance = 5;
      agent_send(h);
      common::VnicAction v;  // the agent programs the port's vNIC (v3+): version 1
      v.vnic_id = kVnic;
      v.overlay_ip = s.overlay;
      v.overlay_mac = {2, 0, 0, 0, 1, s.mac_last};
      agent_txn({common::make_vnic_entry(v)}, {});
    }
    pw = std::make_unique<PortWorker<FakeIo>>(pc, table, *host, lanes ? static_cast<AgentLink*>(lane1.get())
                                                                      : dpu ? &agent : nullptr, io);
    dpu_mode = dpu || lanes;
    if (!dpu_mode) add_route();
  }

  // ---- lanes: the agent's side of the channel
  template <class M>
  void agent_send(M m) {
    m.hdr.seq = agent_seq++;
    ch->on_command(common::to_raw(m), io.now);
  }
  // One transaction: PUTs then DELs, committed at the next version (its digest the staged one).
  void agent_txn(const std::vector<common::Level2Entry>& puts, const std::vector<common::EntryKey>& dels) {
    common::BeginMsg b;
    b.txn = ++agent_txn_id;
    b.base_version = table.version();
    agent_send(b);
    for (const common::Level2Entry& e : puts) {
      common::PutMsg p;
      p.txn = b.txn;
      p.entry = e;
      agent_send(p);
    }
    for (const common::EntryKey& k : dels) {
      common::DelMsg d;
      d.txn = b.txn;
      d.key = k;
      agent_send(d);
    }
    common::CommitMsg c;
    c.txn = b.txn;
    c.version = table.version() + 1;
    c.digest = table.staged_digest().value;
    c.entry_count = table.staged_digest().count;
    agent_send(c);
  }
  common::Level2Entry route_entry() const {
    common::EgressAction a;
    a.underlay_src_ip = spec.underlay;
    a.underlay_dst_ip = spec.peer_underlay;
    a.dst_mac = {2, 0, 0, 0, 0, 0xfe};
    a.path_base_port = common::kEntropyPortBase;
    a.path_count = 4;
    return common::make_egress_entry(common::egress_key(kVnic, spec.peer_overlay), a);
  }
  // Lcore 0's turn after the channel took the commands: what the worker does on it.
  void lcore0_turn() {
    ch->tick(io.now);
    if (publish) fanout->publish(ch.get());
    lane0->adopt();
    lane0->acknowledge();
    fanout->drain_punts([&](const common::EntryKey& k) { handed.push_back(k); });
    while (const common::RawMessage* m = ch->peek_event()) {
      if (!commit_event_ready(*m, fanout->visible_version())) break;
      common::RawMessage r;
      ch->pop_event(r);
      released.push_back(r);
    }
  }
  // Versions the agent has been told are committed.
  std::vector<uint64_t> committed_told() const {
    std::vector<uint64_t> v;
    for (const common::RawMessage& m : released)
      if (m.type() == common::MessageType::kCommitted) v.push_back(common::as<common::CommittedMsg>(m).version);
    return v;
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
    uint32_t work = 0;
    if (lane1 && adopt) {  // lcore 1: the newest view lcore 0 published, before its bursts
      work += lane1->adopt() ? 1 : 0;
      work += pw->follow_agent(now);
      lane1->acknowledge();
    }
    work += pw->run_once(now);
    if (dpu_mode && !lane1) work += pw->follow_agent(now);
    if (lane1) lcore0_turn();
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
  // lanes only (under Pair::with()): the two lcores' fanout, the channel, what lcore 0 did
  std::unique_ptr<CommitFanout> fanout;
  std::unique_ptr<RnicChannel> ch;
  std::unique_ptr<LcoreAgent> lane0, lane1;
  uint32_t agent_seq = 0, agent_txn_id = 0;
  bool publish = true;  // lcore 0 publishes what the channel committed
  bool adopt = true;    // lcore 1 adopts what lcore 0 published
  std::vector<common::EntryKey> handed;       // misses lcore 1 handed to lcore 0
  std::vector<common::RawMessage> released;  // events lcore 0 let go to the agent
  std::unique_ptr<PortWorker<FakeIo>> pw;
  bool dpu_mode = false;
};

struct PairOptions {
  bool dpu_a = false;  // A's routes come from the (fake) agent: none at start
  bool lanes_a = false;  // A is lcore 1 of two under a real channel (Node's lanes)
  Reliability mode = Reliability::kIrn;
};

class Pair {
 public:
  static constexpr uint32_t kUnderlayA = 0x0A000001, kUnderlayB = 0x0A000002;
  static constexpr uint32_t kOverlayA = 0xC0A80701, kOverlayB = 0xC0A80702;

  explicit Pair(PairOptions o = {})
      : dir_(temp_dir()),
        a(dir_, "A", {kUnderlayA, kOverlayA, kUnderlayB, kOverlayB, 1}, o.dpu_a, o.mode, o.lanes_a),
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
