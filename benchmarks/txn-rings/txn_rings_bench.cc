// Transactions over the real DPU <-> RNIC rings between two processes. The
// agent process creates the channel file with dpu/dpdk's ChannelFile (rte_rings
// in the shared file) and drives dpu/channel's AgentChannel the way tandem-dpu's
// loop does; a forked worker process attaches with rnic/dpdk's DpuLink (the
// tandem-rnic --dpu-channel code: RnicChannel + level-2 table, BAR, punt slots)
// and runs its service loop. Both busy-poll, each pinned to its own core.
// Parts, each with a baseline measured in the same run:
//   latency  submit -> COMMITTED at the agent, 1- and 16-entry txns, one at a
//            time; baseline: a raw 64-byte rte_ring ping-pong between the same
//            two processes (the floor for any round trip)
//   bulk     entries/s for large txns (--bulk-txn entries each), back to back;
//            baseline: the same txns through the same objects in one process
//            with in-memory queues (what benchmarks/txn measures)
//   newflow  the worker misses new flows and punts them (DpuLink::punt: slot +
//            PUNT event); the agent reads the slot, resolves the key against
//            level 1 (change_set_for_miss), merges, commits; the worker counts
//            a flow installed when its own table lookup hits. Baseline: the
//            same resolution and channel objects back to back in one process.
// Left out against tandem-dpu/tandem-rnic: packet I/O (the misses are
// generated, not received), the agent's SQLite save per commit and its
// control socket; the agent loop below is a copy of dpu/agent (agent_core.cc, punt_resolution.cc)'s.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/channel/channel_region.h"
#include "dpu/channel/agent_channel.h"
#include "dpu/dpdk/channel_file.h"
#include "dpu/model/level1_state.h"
#include "dpu/txn/derive.h"
#include "dpu/txn/pending_punts.h"
#include "rnic/dpdk/dpu_link.h"
#include "rnic/table/level2_table.h"
#include "rnic/table/rnic_channel.h"

namespace {

using namespace tandem::common;
using tandem::dpu::AgentChannel;
using tandem::dpu::AgentChannelConfig;
using tandem::dpu::ChangeSet;
using tandem::dpu::ChannelState;
using tandem::dpu::Level1State;

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// Involuntary context switches of this process so far: how often the other
// engineers' processes on the 2 shared cores preempted it.
uint64_t preempted() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_nivcsw);
}

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "txn-rings: %s\n", why.c_str());
  std::exit(1);
}

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (sched_setaffinity(0, sizeof s, &s) != 0) die("cannot pin to cpu " + std::to_string(cpu));
}

struct Pct {
  double p50 = 0, p99 = 0, p999 = 0, mean = 0;
};
Pct percentiles(std::vector<uint64_t> v) {
  Pct p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<std::size_t>(q * v.size()))] / 1e3; };
  p.p50 = at(0.50);
  p.p99 = at(0.99);
  p.p999 = at(0.999);
  double s = 0;
  for (uint64_t x : v) s += x;
  p.mean = s / v.size() / 1e3;
  return p;
}

// --- workload ---------------------------------------------------------------

constexpr uint32_t kVni = 100;
constexpr uint32_t kSrcVnic = 1;
constexpr uint32_t kFlowIpBase = 0x0B000001;  // 11.0.0.1 on: destination overlay IPs of new flows
constexpr uint32_t kLatencyKeys = 4096;       // latency txns rewrite these keys (vNIC 2)
constexpr uint32_t kBulkVnic = 3;             // bulk txns install fresh keys of vNIC 3

Level2Entry egress_entry(uint32_t vnic, uint32_t ip, uint32_t dst) {
  EgressAction a;
  a.underlay_src_ip = 0x0A000001;
  a.underlay_dst_ip = dst;
  a.dst_mac = {2, 0, 0, 0, 0, 1};
  a.vni = kVni;
  a.path_count = 4;
  return make_egress_entry(egress_key(vnic, ip), a);
}

EntryKey flow_key(uint32_t i) { return egress_key(kSrcVnic, kFlowIpBase + i); }

// Level 1 for the new-flow part: one tenant, the source vNIC on rnic0, one
// mapping per destination, each behind its own underlay host (so each flow
// installs two new entries: egress and its return-direction ingress).
void build_level1(Level1State& s, uint32_t flows) {
  auto apply = [&](const tandem::dpu::Change& c) {
    auto r = s.apply(c);
    if (!r.ok()) die("level-1 setup: " + r.message);
  };
  apply(tandem::dpu::AddTenant{kVni, "bench"});
  apply(tandem::dpu::AddRnic{"rnic0", 0x0A000001, {2, 0, 0, 0, 0, 1}, 49152, 4});
  apply(tandem::dpu::AddVnic{kSrcVnic, kVni, "rnic0", 0x0AFF0001, {2, 0, 0, 0, 1, 1}});
  s.reserve_mappings(flows + 16);
  for (uint32_t i = 0; i < flows; ++i)
    apply(tandem::dpu::AddMapping{kVni, kFlowIpBase + i, 0x0A800001 + i, {2, 0, 0, 0, 0, 2}, "rnic1"});
}

// --- the agent side (both transports) ----------------------------------------

// What tandem-dpu's Link does with outcomes and punts (dpu/agent (agent_core.cc, punt_resolution.cc):
// pending resolutions, revalidation of each committed one against level 1),
// minus the SQLite save.
struct AgentSide {
  AgentChannel ch;
  const Level1State* l1 = nullptr;
  const ChannelView* view = nullptr;  // channel file (punt slots); nullptr in memory
  bool revalidate = true;  // --no-revalidate: as the bench was before the agent revalidated
  tandem::dpu::PendingPunts pending;
  uint64_t next_tag = 1ull << 40;
  uint64_t punts = 0, resolved = 0, refused = 0, duplicate = 0, slot_lost = 0, revoked = 0;
  std::vector<tandem::dpu::TxnOutcome> outcomes;  // last take_outcomes()
  std::string target;                              // reused, as in dpu/agent
  std::vector<Level2Entry> revalidate_puts;

  explicit AgentSide(const AgentChannelConfig& c) : ch("rnic0", c) {}

  void after_events() {
    outcomes = ch.take_outcomes();
    for (auto& o : outcomes)
      for (uint64_t tag : o.tags) {
        const tandem::dpu::PendingPunts::Entry* pp = pending.find(tag);
        if (!pp) continue;
        if (o.committed && revalidate && l1 && tandem::dpu::needs_revalidation(*l1, pp->level1_generation)) {
          revalidate_puts.assign(pp->installs().begin(), pp->installs().end());
          ChangeSet undo = tandem::dpu::revalidate_resolution(*l1, ch.shadow(), "rnic0", pp->missed, revalidate_puts);
          if (!undo.ops.empty()) {
            ++revoked;
            undo.tag = next_tag++;
            ch.submit(std::move(undo));
          }
        }
        pending.erase(tag);
      }
    std::vector<PuntMsg> punts = ch.take_punts();
    if (l1) tandem::dpu::warm_for_punts(*l1, &ch.shadow(), punts);  // as dpu/agent
    for (const PuntMsg& p : punts) resolve(p);
  }

  void resolve(const PuntMsg& p) {
    ++punts;
    uint8_t hdr[2048];
    std::size_t len = 0;
    if (view && p.length && view->read_slot(p.slot, p.generation, hdr, sizeof hdr, len) != ChannelView::SlotRead::kOk)
      ++slot_lost;
    if (pending.contains(p.missed)) {
      ++duplicate;
      return;
    }
    tandem::dpu::ResolveStatus why{};
    uint64_t tag = next_tag++;
    auto cs = tandem::dpu::change_set_for_miss(*l1, p.missed, tag, &target, &why, &ch.shadow(), &pending);
    if (!cs || target != "rnic0") {
      ++refused;
      return;
    }
    ++resolved;
    pending.add(p.missed, *cs, l1->generation());
    ch.submit(std::move(*cs));
  }
};

// --- shared control block between the two processes -------------------------

enum Phase : int { kIdle = 0, kPingPong = 1, kService = 2, kNewFlow = 3, kStop = 9 };

struct Control {
  std::atomic<int> ready{0};   // agent: files created
  std::atomic<int> phase{kIdle};
  std::atomic<int> ack{kIdle};  // worker: phase it is in
  uint32_t flows = 0, window = 0, first = 0;  // new flows first .. first+flows-1
  uint64_t budget_rate = 0;                   // the worker's punt budget (0: off)
  uint32_t budget_burst = 128;
  std::atomic<int> newflow_done{0};
  double newflow_s = 0;
  uint64_t repunts = 0, installed = 0;
  uint64_t over_budget = 0;  // punts the worker's per-vNIC punt budget refused (must stay 0)
  double lat_p50 = 0, lat_p99 = 0, lat_p999 = 0;
  uint64_t newflow_preempted = 0;      // worker, during its new-flow run
  std::atomic<uint64_t> worker_preempted{0};  // worker, whole run (updated each phase change)
};

// --- worker process ------------------------------------------------------------

void worker_newflow(Control& c, tandem::rnic::dpdk::DpuLink& link, tandem::rnic::Level2Table& table) {
  const uint32_t flows = c.flows, window = c.window, first = c.first;
  std::vector<uint64_t> punted_at(flows, 0), lat;
  lat.reserve(flows);
  uint8_t hdr[64] = {};  // stand-in for the missed packet's headers
  uint32_t head = 0, next = 0;
  uint64_t repunts = 0, over_budget = 0;
  using Punted = tandem::rnic::dpdk::DpuLink::Punted;
  const uint64_t t0 = now_ns(), pre0 = preempted();
  while (head < flows) {
    uint64_t now = now_ns();
    link.service(now);
    auto snap = table.begin_read();
    while (head < next && table.lookup(snap, flow_key(first + head))) {
      lat.push_back(now - punted_at[head]);
      ++head;
    }
    if (head < next && now - punted_at[head] > 20'000'000) {  // the next packet of a slow flow misses again
      EntryKey k = flow_key(first + head);
      std::memcpy(hdr, &k, sizeof k);
      if (link.punt(k, hdr, sizeof hdr, 0, now) == Punted::kOverBudget) ++over_budget;
      punted_at[head] = now;
      ++repunts;
    }
    for (uint32_t k = 0; k < 64 && next < flows && next - head < window; ++k, ++next) {
      EntryKey key = flow_key(first + next);
      if (table.lookup(snap, key)) die("flow installed before it missed");
      std::memcpy(hdr, &key, sizeof key);
      if (link.punt(key, hdr, sizeof hdr, 0, now) == Punted::kOverBudget) ++over_budget;
      punted_at[next] = now;
    }
    // A refused punt leaves its flow waiting for a re-punt: the run would
    // measure the budget (1,000/s per vNIC by default), not the set-up path.
    if (over_budget) die("punts refused by the worker's punt budget: new flows would be set up at its rate");
    if (now - t0 > 120'000'000'000ull) die("new flows not installed within 120 s (" + std::to_string(head) + " of " +
                                           std::to_string(flows) + ")");
  }
  c.newflow_s = (now_ns() - t0) / 1e9;
  Pct p = percentiles(std::move(lat));
  c.lat_p50 = p.p50;
  c.lat_p99 = p.p99;
  c.lat_p999 = p.p999;
  c.repunts = repunts;
  c.installed = head;
  c.over_budget = over_budget;
  c.newflow_preempted = preempted() - pre0;
  c.newflow_done.store(1, std::memory_order_release);
}

int worker_main(Control& c, const std::string& chan_path, const std::string& pp_path, uint32_t capacity, int cpu) {
  pin(cpu);
  dup2(2, 1);  // DpuLink reports attaching on stdout; --json owns the agent's stdout
  while (!c.ready.load(std::memory_order_acquire)) usleep(1000);
  // Ping-pong rings: the second file's two rings, mapped independently.
  int fd = ::open(pp_path.c_str(), O_RDWR);
  if (fd < 0) die("worker cannot open " + pp_path);
  void* pp = mmap(nullptr, kDefaultLayout.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (pp == MAP_FAILED || !check_channel(pp, kDefaultLayout.total_bytes).empty()) die("worker: bad ping-pong file");
  auto* pp_cmd = static_cast<rte_ring*>(channel_cmd_ring(pp));
  auto* pp_evt = static_cast<rte_ring*>(channel_evt_ring(pp));

  tandem::rnic::Level2Table table({capacity});
  // The punt budget off: one vNIC's new flows are the whole workload here, and
  // tandem-rnic's default budget (1,000 punts/s per vNIC, --punt-budget) would
  // set the rate. Its cost is measured with it on (--punt-budget).
  tandem::rnic::dpdk::DpuLink link(chan_path, table, static_cast<uint64_t>(getpid()), 3'000'000'000ull, 0,
                                   tandem::rnic::port::PuntBudgetConfig{c.budget_rate, c.budget_burst});
  for (;;) {
    int ph = c.phase.load(std::memory_order_acquire);
    if (c.ack.load(std::memory_order_relaxed) != ph) {
      c.worker_preempted.store(preempted(), std::memory_order_relaxed);
      c.ack.store(ph, std::memory_order_release);
    }
    if (ph == kStop) break;
    if (ph == kPingPong) {
      RawMessage m[32];
      while (c.phase.load(std::memory_order_relaxed) == kPingPong) {
        unsigned n = rte_ring_dequeue_burst_elem(pp_cmd, m, sizeof(RawMessage), 32, nullptr);
        if (n) rte_ring_enqueue_bulk_elem(pp_evt, m, sizeof(RawMessage), n, nullptr);
      }
    } else if (ph == kService || ph == kNewFlow) {
      link.service(now_ns());
      if (ph == kNewFlow && !c.newflow_done.load(std::memory_order_acquire)) worker_newflow(c, link, table);
    } else {
      usleep(100);
    }
  }
  munmap(pp, kDefaultLayout.total_bytes);
  return 0;
}

// --- agent process: the parts over real rings ----------------------------------

struct RingAgent {
  tandem::dpu::dpdk::ChannelFile& file;
  AgentSide side;
  std::deque<RawMessage> unsent;

  RingAgent(tandem::dpu::dpdk::ChannelFile& f, const AgentChannelConfig& c) : file(f), side(c) { side.view = &f.view(); }

  // Burst buffers as members, as in dpu/agent: RawMessage zero-initialises.
  std::array<RawMessage, 64> ev_buf, out_buf;

  // dpu/agent (agent_core.cc, punt_resolution.cc)'s Agent::service for one link.
  bool service(uint64_t now) {
    AgentChannel& ch = side.ch;
    RawMessage* ev = ev_buf.data();
    ChannelView& view = file.view();  // the agent's own geometry and ring ends, as dpu/agent
    unsigned n = view.events().dequeue(ev, 64);
    for (unsigned i = 0; i < n; ++i) ch.on_event(ev[i], now);
    ch.on_bar(tandem::dpu::sample_bar(view.bar()), now);
    ch.tick(now);
    RawMessage m;
    while (ch.pop_command(m)) unsent.push_back(m);
    while (!unsent.empty()) {
      RawMessage* out = out_buf.data();
      unsigned k = 0;
      for (; k < 64 && k < unsent.size(); ++k) out[k] = unsent[k];
      unsigned sent = view.commands().enqueue(out, k);
      for (unsigned i = 0; i < sent; ++i) unsent.pop_front();
      if (sent < k) break;
    }
    side.after_events();
    return n > 0;
  }
};

// Runs one change set to COMMITTED; returns submit -> COMMITTED in ns.
template <class Svc>
uint64_t commit_one(AgentSide& side, ChangeSet cs, Svc&& service) {
  uint64_t tag = cs.tag;
  uint64_t t0 = now_ns();
  side.ch.submit(std::move(cs));
  for (;;) {
    uint64_t now = now_ns();
    service(now);
    for (auto& o : side.outcomes)
      if (std::find(o.tags.begin(), o.tags.end(), tag) != o.tags.end()) {
        if (!o.committed) die("latency txn aborted, reason " + std::to_string(int(o.reason)));
        return now_ns() - t0;
      }
    if (now - t0 > 5'000'000'000ull) die("txn not committed within 5 s (channel " +
                                         std::string(channel_state_name(side.ch.state())) + ")");
  }
}

ChangeSet latency_cs(uint64_t tag, uint32_t entries, uint32_t& cursor) {
  ChangeSet cs;
  cs.tag = tag;
  for (uint32_t i = 0; i < entries; ++i, ++cursor)
    cs.put(egress_entry(2, 0x0C000000 + cursor % kLatencyKeys, 0x0A100000 + cursor));  // new value each time
  return cs;
}

// Bulk: `entries` fresh keys in change sets of `per_txn`, all queued at once.
template <class Svc>
double bulk_entries_per_s(AgentSide& side, uint32_t entries, uint32_t per_txn, uint32_t first, Svc&& service,
                          double* cpu_s = nullptr) {
  uint64_t t0 = now_ns();
  double cpu0 = thread_cpu_s();
  uint64_t want = side.ch.stats().txns_committed + (entries + per_txn - 1) / per_txn;
  for (uint32_t i = 0; i < entries; i += per_txn) {
    ChangeSet cs;
    cs.tag = i;
    for (uint32_t k = i; k < std::min(entries, i + per_txn); ++k)
      cs.put(egress_entry(kBulkVnic, first + k, 0x0A200000 + k));
    side.ch.submit(std::move(cs));
  }
  while (side.ch.stats().txns_committed < want) {
    uint64_t now = now_ns();
    service(now);
    for (auto& o : side.outcomes)
      if (!o.committed) die("bulk txn aborted, reason " + std::to_string(int(o.reason)));
    if (now - t0 > 120'000'000'000ull) die("bulk txns not committed within 120 s");
  }
  if (cpu_s) *cpu_s = thread_cpu_s() - cpu0;
  return entries / ((now_ns() - t0) / 1e9);
}

// --- in-memory baseline: same objects, one process, queues for rings -----------

struct MemPair {
  tandem::rnic::Level2Table table;
  tandem::rnic::RnicChannel rnic;
  AgentSide side;
  std::unique_ptr<Bar> bar = std::make_unique<Bar>();

  MemPair(uint32_t capacity, const AgentChannelConfig& c) : table({capacity}), rnic(table, {}), side(c) {}

  std::array<RawMessage, 64> burst;  // what DpuLink::service hands the channel per ring dequeue

  void service(uint64_t now) {
    RawMessage m;
    for (;;) {
      std::size_t n = 0;
      while (n < burst.size() && side.ch.pop_command(burst[n])) ++n;
      if (n == 0) break;
      rnic.on_commands(burst.data(), n, now);
    }
    rnic.tick(now);
    while (rnic.pop_event(m)) side.ch.on_event(m, now);
    rnic.publish(*bar);
    side.ch.on_bar(tandem::dpu::sample_bar(*bar), now);
    side.ch.tick(now);
    side.after_events();
  }
  void activate() {
    side.ch.start(now_ns());
    for (int i = 0; i < 100 && side.ch.state() != ChannelState::kActive; ++i) service(now_ns());
    if (side.ch.state() != ChannelState::kActive) die("in-memory channel did not become ACTIVE");
  }
};

// New flows in one process: punts straight into RnicChannel::punt (no slot),
// same window and install check as the worker.
struct MemNewFlow {
  double s = 0, cpu_s = 0;
  Pct lat;
};
MemNewFlow mem_newflow(MemPair& p, uint32_t first, uint32_t flows, uint32_t window) {
  std::vector<uint64_t> punted_at(flows, 0), lat;
  lat.reserve(flows);
  uint32_t head = 0, next = 0;
  uint64_t t0 = now_ns();
  double cpu0 = thread_cpu_s();
  while (head < flows) {
    uint64_t now = now_ns();
    p.service(now);
    auto snap = p.table.begin_read();
    while (head < next && p.table.lookup(snap, flow_key(first + head))) {
      lat.push_back(now - punted_at[head]);
      ++head;
    }
    for (uint32_t k = 0; k < 64 && next < flows && next - head < window; ++k, ++next) {
      p.rnic.punt(0, 0, 0, 0, flow_key(first + next));
      punted_at[next] = now;
    }
    if (now - t0 > 120'000'000'000ull) die("in-memory new flows not installed within 120 s");
  }
  return {(now_ns() - t0) / 1e9, thread_cpu_s() - cpu0, percentiles(std::move(lat))};
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  std::string part = "all", dir = "/dev/shm", cpus = "none";
  uint32_t samples = 20000, bulk_entries = 1 << 18, bulk_txn = 4096, flows = 1 << 18, window = 256;
  int reps = 3;
  std::string budget = "0";
  CLI::App app{"Transactions over the real DPU<->RNIC shared-memory rings between two processes"};
  app.add_flag("--json", json, "print one JSON object instead of tables");
  bool no_pipeline = false;
  app.add_flag("--no-pipeline", no_pipeline,
               "one txn in flight at a time (tandem-dpu pipelines: the next txn is sent while one commits)");
  bool no_revalidate = false, no_baseline = false;
  app.add_flag("--no-baseline", no_baseline,
               "newflow: skip the in-memory baseline (to profile the ring processes alone; ratio not computed)");
  app.add_flag("--no-revalidate", no_revalidate,
               "newflow: skip the agent's revalidation of each committed resolution (the bench before it had it)");
  app.add_option("--part", part, "all, latency, bulk or newflow")->check(CLI::IsMember({"all", "latency", "bulk", "newflow"}));
  app.add_option("--samples", samples, "latency: txns per size and rep")->check(CLI::Range(100, 1000000));
  app.add_option("--bulk-entries", bulk_entries, "bulk: entries installed per rep")->check(CLI::Range(4096, 1 << 22));
  app.add_option("--bulk-txn", bulk_txn, "bulk: entries per txn")->check(CLI::Range(16, 4096));
  app.add_option("--flows", flows, "newflow: new flows punted and installed per rep")->check(CLI::Range(1024, 1 << 22));
  app.add_option("--window", window, "newflow: flows punted and not yet installed, at most")->check(CLI::Range(1, 1 << 16));
  app.add_option("--reps", reps, "repetitions; the best is reported (lowest 1-entry p99 for latency)")->check(CLI::Range(1, 20));
  app.add_option("--cpus", cpus, "agent,worker CPUs to pin to, or 'none'");
  app.add_option("--punt-budget", budget,
                 "newflow: the worker's punt budget RATE[:BURST] per vNIC (tandem-rnic --punt-budget; default 0: off)");
  app.add_option("--dir", dir, "directory for the channel files (tandem-dpu's default: /dev/shm)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  int agent_cpu = -1, worker_cpu = -1;
  if (cpus != "none" && std::sscanf(cpus.c_str(), "%d,%d", &agent_cpu, &worker_cpu) != 2) {
    std::fprintf(stderr, "txn-rings: --cpus wants A,W or none\n");
    return 2;
  }
  const bool do_lat = part == "all" || part == "latency";
  const bool do_bulk = part == "all" || part == "bulk";
  const bool do_flow = part == "all" || part == "newflow";
  const uint64_t cap64 = uint64_t(reps) * ((do_bulk ? bulk_entries : 0) + (do_flow ? 2ull * flows : 0)) +
                         2 * kLatencyKeys + 4096;
  if (cap64 > (1u << 24)) {
    std::fprintf(stderr, "txn-rings: reps x (bulk entries + 2 x flows) must stay below 16M table entries\n");
    return 2;
  }
  const uint32_t capacity = static_cast<uint32_t>(cap64);

  std::string tag = std::to_string(getpid());
  std::string chan_path = dir + "/tandem-txnbench-" + tag + ".chan";
  std::string pp_path = dir + "/tandem-txnbench-pp-" + tag + ".chan";
  auto* ctl = static_cast<Control*>(
      mmap(nullptr, sizeof(Control), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (ctl == MAP_FAILED) die("cannot map the control block");
  new (ctl) Control();
  {
    unsigned long long rate = 0;
    unsigned burst = 128;
    int n = std::sscanf(budget.c_str(), "%llu:%u", &rate, &burst);
    if (n < 1 || burst == 0) {
      std::fprintf(stderr, "txn-rings: --punt-budget wants RATE[:BURST], got %s\n", budget.c_str());
      return 2;
    }
    ctl->budget_rate = rate;
    ctl->budget_burst = burst;
  }

  pid_t child = fork();
  if (child < 0) die("fork failed");
  if (child == 0) _exit(worker_main(*ctl, chan_path, pp_path, capacity, worker_cpu));

  pin(agent_cpu);
  auto finish = [&] {
    ctl->phase.store(kStop, std::memory_order_release);
    int st = 0;
    if (child > 0) waitpid(child, &st, 0);
    ::unlink(chan_path.c_str());
    ::unlink(pp_path.c_str());
    return st;
  };
  // The worker dies (exit 1) with its reason on stderr: stop waiting for it then.
  auto worker_gone = [&] {
    int st = 0;
    if (waitpid(child, &st, WNOHANG) != child) return false;
    child = -1;
    return true;
  };
  auto set_phase = [&](Phase p) {
    ctl->phase.store(p, std::memory_order_release);
    uint64_t t0 = now_ns();
    while (ctl->ack.load(std::memory_order_acquire) != p) {
      if (worker_gone()) {
        finish();
        die("the worker process died");
      }
      if (now_ns() - t0 > 10'000'000'000ull) {
        finish();
        die("worker did not follow");
      }
    }
  };

  nlohmann::json out;
  out["bench"] = "txn-rings";
  struct Row {
    std::string what, unit, baseline_name;
    double ours, baseline;
  };
  std::vector<Row> rows;
  const uint64_t agent_pre0 = preempted();
  try {
    tandem::dpu::dpdk::ChannelFile file(chan_path, "rnic0", 0);
    tandem::dpu::dpdk::ChannelFile ppfile(pp_path, "pingpong", 1);
    ctl->ready.store(1, std::memory_order_release);
    AgentChannelConfig cfg;
    cfg.agent_instance = static_cast<uint32_t>(getpid());
    cfg.pipeline = !no_pipeline;  // as dpu/agent (agent_core.cc, punt_resolution.cc)

    set_phase(kService);
    RingAgent ra(file, cfg);
    ra.side.revalidate = !no_revalidate;
    auto svc = [&](uint64_t now) { ra.service(now); };
    ra.side.ch.start(now_ns());
    for (uint64_t t0 = now_ns(); ra.side.ch.state() != ChannelState::kActive;) {
      svc(now_ns());
      if (now_ns() - t0 > 5'000'000'000ull) die("channel did not become ACTIVE over the rings");
    }
    MemPair mem(capacity, cfg);
    mem.side.revalidate = !no_revalidate;
    mem.activate();
    auto msvc = [&](uint64_t now) { mem.service(now); };

    if (do_lat) {
      // Per rep: ping-pong floor, then 1- and 16-entry txns over the rings and in memory.
      struct LatRep {
        Pct pp, ring[2], mem[2];
        uint64_t preempted = 0;
      };
      std::vector<LatRep> lr(reps);
      uint32_t cursor = 0;
      for (int r = 0; r < reps; ++r) {
        uint64_t pre = preempted();
        set_phase(kPingPong);
        std::vector<uint64_t> rtt;
        rtt.reserve(samples);
        RawMessage m, back;
        for (uint32_t i = 0; i < samples + 1000; ++i) {
          std::memcpy(m.bytes, &i, sizeof i);
          uint64_t t0 = now_ns();
          while (rte_ring_enqueue_elem(ppfile.cmd_ring(), &m, sizeof m) != 0) {
          }
          while (rte_ring_dequeue_elem(ppfile.evt_ring(), &back, sizeof back) != 0) {
          }
          uint64_t t = now_ns() - t0;
          if (std::memcmp(&back, &m, sizeof m) != 0) die("ping-pong message came back changed");
          if (i >= 1000) rtt.push_back(t);  // the first thousand warm up
        }
        lr[r].pp = percentiles(std::move(rtt));
        set_phase(kService);
        int k = 0;
        for (uint32_t entries : {1u, 16u}) {
          std::vector<uint64_t> ring_ns, mem_ns;
          ring_ns.reserve(samples);
          for (uint32_t i = 0; i < samples + 1000; ++i) {
            uint64_t t = commit_one(ra.side, latency_cs(i, entries, cursor), svc);
            if (i >= 1000) ring_ns.push_back(t);
          }
          uint32_t mc = 0;
          for (uint32_t i = 0; i < samples; ++i) mem_ns.push_back(commit_one(mem.side, latency_cs(i, entries, mc), msvc));
          lr[r].ring[k] = percentiles(std::move(ring_ns));
          lr[r].mem[k++] = percentiles(std::move(mem_ns));
        }
        lr[r].preempted = preempted() - pre;
      }
      const LatRep* b = &lr[0];
      for (const LatRep& x : lr)
        if (x.ring[0].p99 < b->ring[0].p99) b = &x;
      nlohmann::json jl, all = nlohmann::json::array();
      for (int k = 0; k < 2; ++k) {
        std::string n = std::string(k ? "16" : "1") + "-entry txn commit latency";
        rows.push_back({n + " p50", "us", "rte_ring 64 B ping-pong p50", b->ring[k].p50, b->pp.p50});
        rows.push_back({n + " p99", "us", "rte_ring 64 B ping-pong p99", b->ring[k].p99, b->pp.p99});
        rows.push_back({n + " p999", "us", "rte_ring 64 B ping-pong p999", b->ring[k].p999, b->pp.p999});
        jl[k ? "16" : "1"] = {{"p50_us", b->ring[k].p50},     {"p99_us", b->ring[k].p99},
                              {"p999_us", b->ring[k].p999},   {"mean_us", b->ring[k].mean},
                              {"in_memory_p50_us", b->mem[k].p50}, {"in_memory_p99_us", b->mem[k].p99},
                              {"in_memory_p999_us", b->mem[k].p999}};
      }
      for (const LatRep& x : lr)
        all.push_back({{"pingpong_p99_us", x.pp.p99}, {"one_p50_us", x.ring[0].p50}, {"one_p99_us", x.ring[0].p99},
                       {"sixteen_p99_us", x.ring[1].p99}, {"agent_preempted", x.preempted}});
      jl["reps"] = all;
      jl["samples"] = samples;
      out["latency"] = jl;
      out["pingpong_rtt_us"] = {{"p50", b->pp.p50}, {"p99", b->pp.p99}, {"p999", b->pp.p999}};
    }

    if (do_bulk) {
      double ring = 0, memr = 0, mem_cpu = 0;
      for (int r = 0; r < reps; ++r) {
        uint32_t first = 0x0D000000 + r * bulk_entries;
        ring = std::max(ring, bulk_entries_per_s(ra.side, bulk_entries, bulk_txn, first, svc));
        double cpu = 0, m = bulk_entries_per_s(mem.side, bulk_entries, bulk_txn, first, msvc, &cpu);
        if (m > memr) {
          memr = m;
          mem_cpu = cpu;
        }
      }
      if (!(mem.table.digest() == mem.side.ch.shadow().digest())) die("in-memory table and shadow differ");
      rows.push_back({"bulk txns (" + std::to_string(bulk_txn) + " entries each)", "M entries/s",
                      "same txns, in-memory queues, one process", ring / 1e6, memr / 1e6});
      out["bulk"] = {{"entries", bulk_entries},
                     {"per_txn", bulk_txn},
                     {"ours_M_entries_per_s", ring / 1e6},
                     {"in_memory_M_entries_per_s", memr / 1e6},
                     {"in_memory_cpu_ns_per_entry", mem_cpu * 1e9 / bulk_entries}};
    }

    if (do_flow) {
      Level1State l1;
      build_level1(l1, flows * reps);
      ra.side.l1 = &l1;
      mem.side.l1 = &l1;
      double ring = 0, memr = 0;
      MemNewFlow mbest;
      nlohmann::json best;
      for (int r = 0; r < reps; ++r) {
        ctl->flows = flows;
        ctl->window = window;
        ctl->first = r * flows;
        ctl->newflow_done.store(0, std::memory_order_release);
        uint64_t punts0 = ra.side.punts, dup0 = ra.side.duplicate, lost0 = ra.side.slot_lost,
                 txn0 = ra.side.ch.stats().txns_committed;
        set_phase(kNewFlow);
        uint64_t t0 = now_ns(), polls = 0;
        while (!ctl->newflow_done.load(std::memory_order_acquire)) {
          svc(now_ns());
          if ((++polls & 0xFFF) == 0 && worker_gone()) {
            finish();
            die("the worker process died during the new flows");
          }
          if (now_ns() - t0 > 130'000'000'000ull) die("worker did not finish the new flows");
        }
        set_phase(kService);
        for (uint64_t t1 = now_ns(); now_ns() - t1 < 20'000'000;) svc(now_ns());  // last COMMITTEDs
        double rr = ctl->installed / ctl->newflow_s;
        if (rr > ring) {
          ring = rr;
          best = {{"miss_to_install_us", {{"p50", ctl->lat_p50}, {"p99", ctl->lat_p99}, {"p999", ctl->lat_p999}}},
                  {"punts", ra.side.punts - punts0},
                  {"duplicate_punts", ra.side.duplicate - dup0},
                  {"slot_reused_before_read", ra.side.slot_lost - lost0},
                  {"repunts", ctl->repunts},
                  {"installed", ctl->installed},
                  {"punts_over_budget", ctl->over_budget},
                  {"txns", ra.side.ch.stats().txns_committed - txn0},
                  {"worker_preempted", ctl->newflow_preempted}};
        }
        if (no_baseline) continue;
        MemNewFlow m = mem_newflow(mem, r * flows, flows, window);
        if (flows / m.s > memr) {
          memr = flows / m.s;
          mbest = m;
        }
      }
      if (ra.side.refused || mem.side.refused) die("punts refused by level 1");
      // Level 1 does not change during the run: no committed resolution may be undone.
      if (ra.side.revoked || mem.side.revoked) die("committed resolutions revoked although level 1 did not change");
      rows.push_back({"new flows: punt -> resolve -> txn -> commit", "M flows/s",
                      "same path, in-memory queues, one process", ring / 1e6, memr / 1e6});
      best["flows"] = flows;
      best["revalidated"] = !no_revalidate;
      best["window"] = window;
      best["punt_budget"] = budget;
      best["ours_M_flows_per_s"] = ring / 1e6;
      best["ours_M_entries_per_s"] = 2 * ring / 1e6;
      best["in_memory_M_flows_per_s"] = memr / 1e6;
      best["in_memory_cpu_ns_per_flow"] = mbest.cpu_s * 1e9 / flows;
      best["in_memory_miss_to_install_us"] = {{"p50", mbest.lat.p50}, {"p99", mbest.lat.p99}, {"p999", mbest.lat.p999}};
      out["newflow"] = best;
    }
    // Every run ends with the agent's shadow equal to what the worker committed.
    auto t = bar_read_table(channel_bar(file.base()));
    for (int i = 0; i < 1000 && !t; ++i) t = bar_read_table(channel_bar(file.base()));
    if (!t || t->digest != ra.side.ch.shadow().digest().value || t->entry_count != ra.side.ch.shadow().digest().count)
      die("the worker's committed table differs from the agent's shadow");
    out["agent_txns_committed"] = ra.side.ch.stats().txns_committed;
    out["agent_replays"] = ra.side.ch.stats().replays;
    out["agent_degraded"] = ra.side.ch.stats().degraded;
  } catch (const std::exception& e) {
    finish();
    die(e.what());
  }
  int st = finish();
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("worker process failed");

  out["cpus"] = cpus;
  out["pipeline"] = !no_pipeline;
  out["polling"] = "busy (both processes)";
  out["reps"] = reps;
  out["agent_preempted"] = preempted() - agent_pre0;
  out["worker_preempted"] = ctl->worker_preempted.load();
  if (json) {
    // Headline: new-flow installs/s if measured, else the first row.
    const Row* h = &rows.front();
    for (const Row& r : rows)
      if (r.unit == "M flows/s") h = &r;
    out["unit"] = h->unit;
    out["ours"] = h->ours;
    out["baseline"] = h->baseline;
    out["baseline_name"] = h->baseline_name;
    out["ratio"] = h->ours / h->baseline;
    out["headline"] = h->what;
    nlohmann::json jr = nlohmann::json::array();
    for (const Row& r : rows)
      jr.push_back({{"what", r.what}, {"unit", r.unit}, {"ours", r.ours}, {"baseline", r.baseline},
                    {"baseline_name", r.baseline_name}, {"ratio", r.ours / r.baseline}});
    out["rows"] = jr;
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("transactions over the real channel rings, agent + worker process (cpus %s, busy polling, %s, best of %d)\n",
              cpus.c_str(), no_pipeline ? "one txn in flight" : "pipelined txns", reps);
  std::printf("%-48s %12s %10s %10s %7s  %s\n", "measure", "unit", "ours", "baseline", "ratio", "baseline");
  for (const Row& r : rows)
    std::printf("%-48s %12s %10.3f %10.3f %7.2f  %s\n", r.what.c_str(), r.unit.c_str(), r.ours, r.baseline,
                r.ours / r.baseline, r.baseline_name.c_str());
  if (out.contains("latency"))
    std::printf("in memory, one process: commit latency p50/p99 us 1-entry %.2f/%.2f, 16-entry %.2f/%.2f\n",
                out["latency"]["1"]["in_memory_p50_us"].get<double>(), out["latency"]["1"]["in_memory_p99_us"].get<double>(),
                out["latency"]["16"]["in_memory_p50_us"].get<double>(), out["latency"]["16"]["in_memory_p99_us"].get<double>());
  if (out.contains("bulk"))
    std::printf("bulk in memory: %.0f ns CPU per entry\n", out["bulk"]["in_memory_cpu_ns_per_entry"].get<double>());
  if (out.contains("newflow")) {
    const auto& n = out["newflow"];
    std::printf("new flows: miss -> installed p50/p99/p999 %.0f/%.0f/%.0f us (in memory %.0f/%.0f/%.0f), in memory "
                "%.0f ns CPU per flow; %s txns, %s duplicate punts, %s slots reused before read, %s re-punts\n",
                n["miss_to_install_us"]["p50"].get<double>(), n["miss_to_install_us"]["p99"].get<double>(),
                n["miss_to_install_us"]["p999"].get<double>(), n["in_memory_miss_to_install_us"]["p50"].get<double>(),
                n["in_memory_miss_to_install_us"]["p99"].get<double>(),
                n["in_memory_miss_to_install_us"]["p999"].get<double>(), n["in_memory_cpu_ns_per_flow"].get<double>(),
                n["txns"].dump().c_str(), n["duplicate_punts"].dump().c_str(),
                n["slot_reused_before_read"].dump().c_str(), n["repunts"].dump().c_str());
  }
  std::printf("preempted (involuntary context switches): agent %s, worker %s\n", out["agent_preempted"].dump().c_str(),
              out["worker_preempted"].dump().c_str());
  return 0;
}
