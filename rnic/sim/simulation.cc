#include "rnic/sim/simulation.h"

#include <algorithm>
#include <cmath>

#include "rnic/sim/host_options.h"
#include "rnic/sim/path_discovery.h"
#include "rnic/sim/topology.h"
#include "rnic/sim/workload.h"

namespace tandem::rnic::sim {

namespace {

// Streams of the run seed (see derive_seed): the workload is drawn from its
// own stream, so every policy of a scenario sees the same messages.
constexpr uint64_t kStreamWorkload = 1;
constexpr uint64_t kStreamPsn = 2;
constexpr uint64_t kStreamFabric = 3;

constexpr uint64_t kMaxArenaBytes = 8ull << 30;
// A frame's bytes beyond its payload: L2-L4, BTH, RETH or AETH+SACK, XETH,
// padding, ICRC (and an 802.1Q tag).
constexpr uint32_t kFrameHeadroom = 192;
// Open-loop flows each have their own slots, given back when done: the
// address space is large, the resident set what is in flight.
constexpr uint64_t kMaxPoissonArenaBytes = 1ull << 40;

// Wire bytes of one RC WRITE frame of `payload` bytes (the first carries the
// RETH), preamble, gap and FCS included.
uint64_t write_frame_bytes(uint64_t payload, bool first, bool irn) {
  const uint64_t hdr = 14 + 20 + 8 + 12 + (first ? 16 : 0) + (irn ? 24 : 0) + 4;
  return hdr + ((payload + 3) & ~3ull) + kWireOverhead;
}

// One host per edge switch stands for all of it (they share routes).
std::vector<uint32_t> edge_representatives(const Fabric& fabric) {
  std::vector<uint32_t> reps;
  std::vector<bool> seen(fabric.nodes().size(), false);
  for (uint32_t h = 0; h < fabric.host_count(); ++h) {
    const Node& hn = fabric.nodes()[fabric.host_node(h)];
    const uint32_t sw = fabric.ports()[hn.ports[0]].peer;
    if (!seen[sw]) {
      seen[sw] = true;
      reps.push_back(h);
    }
  }
  return reps;
}

struct PathSum {
  uint64_t delay_ns = 0;   // one way, propagation
  uint64_t frame_ns = 0;   // one frame's serialisation over every link
  uint64_t slowest_bps = ~0ull;
  bool ok = false;
};

PathSum path_sum(const Fabric& fabric, uint32_t src, uint32_t dst, uint64_t frame_bytes) {
  PathSum s;
  for (uint32_t pid : trace_route(fabric, src, dst, 0xC000)) {
    const Port& p = fabric.ports()[pid];
    s.delay_ns += p.params.delay_ns;
    s.frame_ns += serialization_ns(frame_bytes, p.params.rate_bps);
    s.slowest_bps = std::min(s.slowest_bps, p.params.rate_bps);
    s.ok = true;
  }
  return s;
}

double percentile(std::vector<uint64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank.
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  rank = std::clamp<std::size_t>(rank, 1, v.size());
  return static_cast<double>(v[rank - 1]);
}

}  // namespace

Simulation::Simulation(const Scenario& scenario, const PolicySpec& policy, uint64_t seed, const GateFactory& gate)
    : scenario_(scenario),
      policy_(policy),
      seed_(seed),
      opt_(parse_host_options(scenario, policy)),
      frames_(opt_.mtu + kFrameHeadroom),
      fabric_(events_, frames_, derive_seed(seed, kStreamFabric)) {
  build_topology(fabric_, scenario.topology);
  for (const FailureSpec& f : scenario.failures) {
    const int link = fabric_.find_link(f.link);
    if (link < 0) throw ScenarioError("failures: no link named '" + f.link + "'");
  }
  const uint32_t n_hosts = fabric_.host_count();
  const double host_gbps = static_cast<double>(scenario.topology.host_link.rate_bps) / 1e9;
  if (opt_.cc_window_bytes == 0) opt_.cc_window_bytes = max_base_bdp_bytes(fabric_, opt_.mtu, host_gbps);
  totals_.keep_done = scenario.slowdown_step_pct != 0;
  Rng wl_rng(derive_seed(seed, kStreamWorkload));
  std::vector<const WorkloadSpec*> workloads{&scenario.workload};
  for (const WorkloadSpec& w : scenario.more_workloads) workloads.push_back(&w);
  for (uint32_t g = 0; g < workloads.size(); ++g) {
    const WorkloadSpec& w = *workloads[g];
    const std::vector<Flow> flows = make_flows(w, n_hosts, wl_rng, host_gbps);
    groups_.push_back(ConnGroup{w.first_host, w.host_count ? w.host_count : n_hosts - w.first_host, w.start_ns});
    // Each flow's messages go round-robin over qps_per_flow connections.
    for (const Flow& f : flows) {
      const uint32_t q = std::min<uint32_t>(opt_.qps_per_flow, static_cast<uint32_t>(f.sizes.size()));
      for (uint32_t k = 0; k < q; ++k) {
        Conn c;
        c.index = static_cast<uint32_t>(conns_.size());
        c.src = f.src;
        c.dst = f.dst;
        c.start_ns = f.start_ns;
        // The first workload's window is the run's; the others are background then.
        const WorkloadSpec& primary = scenario.workload;
        c.measured = !primary.windowed() ||
                     (g == 0 && f.start_ns >= primary.measure_from_ns && f.start_ns < primary.measure_until_ns);
        c.qp_in_flow = k;
        for (std::size_t m = k; m < f.sizes.size(); m += q) c.sizes.push_back(f.sizes[m]);
        c.outstanding = std::max<uint32_t>(1, w.outstanding / q);
        c.outstanding = std::min<uint32_t>(c.outstanding, static_cast<uint32_t>(c.sizes.size()));
        c.slot_bytes = (*std::max_element(c.sizes.begin(), c.sizes.end()) + 63) & ~63ull;
        c.post_ns.assign(c.sizes.size(), 0);
        c.dynamic_mem = w.kind == WorkloadSpec::Kind::kPoisson && !opt_.send_op;
        totals_.messages += c.sizes.size();
        if (c.measured) totals_.measured += c.sizes.size();
        conns_.push_back(std::move(c));
        conn_group_.push_back(g);
      }
    }
  }
  if (scenario.workload.bidirectional) {
    // The same messages back, over the same QP pair (its QPs made below).
    const std::size_t n = conns_.size();
    for (std::size_t i = 0; i < n; ++i) {
      Conn r = conns_[i];
      r.index = static_cast<uint32_t>(conns_.size());
      std::swap(r.src, r.dst);
      r.twin = static_cast<int32_t>(i);
      totals_.messages += r.sizes.size();
      if (r.measured) totals_.measured += r.sizes.size();
      conns_.push_back(std::move(r));
      conn_group_.push_back(conn_group_[i]);
    }
  }

  // Memory: every connection has `outstanding` slots at both ends.
  std::vector<uint64_t> arena(n_hosts, 0);
  std::vector<uint32_t> qps(n_hosts, 0);
  uint64_t total = 0;
  bool open_loop = false;
  for (Conn& c : conns_) {
    // Open loop (not SEND: its receives are posted up front): slots taken
    // when the flow starts and reused after it; the arena must hold them all
    // in the worst case, but only what is in flight is ever touched.
    open_loop = open_loop || c.dynamic_mem;
    const uint64_t bytes = c.outstanding * c.slot_bytes;
    const uint64_t need = c.dynamic_mem ? Slots::reserve(bytes) : bytes;
    c.send_off = arena[c.src];
    arena[c.src] += need;
    c.recv_off = arena[c.dst];
    arena[c.dst] += need;
    total += 2 * need;
    ++qps[c.src];
    ++qps[c.dst];
  }
  if (total > (open_loop ? kMaxPoissonArenaBytes : kMaxArenaBytes)) {
    throw ScenarioError("workload needs " + std::to_string(total >> 20) + " MiB of registered memory (limit " +
                        (open_loop ? "1 TiB of address space" : "8 GiB") +
                        "): lower outstanding, message sizes or the duration");
  }
  for (const HostJitterSpec& j : scenario.hosts) {
    if (j.host >= static_cast<int>(n_hosts)) {
      throw ScenarioError("hosts[]: no host " + std::to_string(j.host) + " (the topology has " +
                          std::to_string(n_hosts) + ")");
    }
  }
  for (uint32_t h = 0; h < n_hosts; ++h) {
    // A host's own entry wins over an `all` entry.
    HostJitterSpec jit;
    for (const HostJitterSpec& j : opt_.host_jitter ? scenario.hosts : std::vector<HostJitterSpec>{})
      if (j.host < 0) jit = j;
    for (const HostJitterSpec& j : opt_.host_jitter ? scenario.hosts : std::vector<HostJitterSpec>{})
      if (j.host == static_cast<int>(h)) jit = j;
    hosts_.push_back(std::make_unique<SimHost>(h, opt_, fabric_, events_, frames_, conns_, hosts_, totals_, jit));
    hosts_.back()->add_arena_bytes(arena[h]);
    hosts_.back()->finish_memory(qps[h]);
  }
  for (Conn& c : conns_) {
    if (c.twin >= 0) {
      c.src_qpn = conns_[c.twin].dst_qpn;
      c.dst_qpn = conns_[c.twin].src_qpn;
      continue;
    }
    hosts_[c.src]->create_qp_for(c, true);
    hosts_[c.dst]->create_qp_for(c, false);
  }
  Rng psn_rng(derive_seed(seed, kStreamPsn));
  for (Conn& c : conns_) {
    if (c.twin >= 0) continue;
    // Random initial PSNs, so runs cross the 24-bit wrap now and then.
    const auto a_psn = static_cast<uint32_t>(psn_rng.below(1u << 24));
    const auto b_psn = static_cast<uint32_t>(psn_rng.below(1u << 24));
    const auto base = static_cast<uint32_t>(psn_rng.below(1u << 16));
    hosts_[c.src]->connect_qp(c, true, b_psn, a_psn, hosts_[c.src]->choose_path_seed(c, true, base));
    hosts_[c.dst]->connect_qp(c, false, a_psn, b_psn, hosts_[c.dst]->choose_path_seed(c, false, base + 1));
  }
  fabric_.set_callbacks([this](uint32_t h, uint32_t frame, uint64_t now) { hosts_[h]->on_frame(frame, now); },
                        [this](uint32_t h, uint64_t now) { hosts_[h]->on_nic_idle(now); });
  for (Conn& c : conns_) {
    hosts_[c.dst]->post_initial_recvs(c);
    events_.push(c.start_ns, EventKind::kHostPost, c.index);
  }
  for (std::size_t i = 0; i < scenario.failures.size(); ++i)
    events_.push(scenario.failures[i].at_ns, EventKind::kLinkState, static_cast<uint32_t>(i));
  if (!scenario.dpu_yaml.empty()) {
    if (!gate) {
      throw ScenarioError("scenario " + scenario.name +
                          " has a dpu: section: it needs the DPU model (run it with tandem-sim, which has it)");
    }
    gate_ = gate(*this);
  } else if (gate) {
    gate_ = gate(*this);
  }
  if (gate_ && gate_->checks_egress())
    for (auto& h : hosts_) h->set_gate(gate_.get());
}

void Simulation::release(uint32_t conn, uint64_t now) {
  Conn& c = conns_[conn];
  hosts_[c.src]->start_conn(c, now);
}

uint64_t Simulation::first_byte_ns(uint32_t conn) const noexcept {
  const Conn& c = conns_[conn];
  return hosts_[c.dst]->first_rx_ns(c.dst_qpn);
}

Simulation::~Simulation() = default;

void Simulation::dispatch(const Event& e) {
  switch (e.kind) {
    case EventKind::kHostTimer:
      hosts_[e.a]->on_timer(e.b, e.time);
      break;
    case EventKind::kHostPost: {
      Conn& c = conns_[e.a];
      if (!gate_ || gate_->admit(c, e.time)) hosts_[c.src]->start_conn(c, e.time);
      break;
    }
    case EventKind::kDpu:
      if (gate_) gate_->on_event(e);
      break;
    case EventKind::kHostDelayedTx:
      hosts_[e.a]->send_delayed(static_cast<uint32_t>(e.b), e.time);
      break;
    case EventKind::kHostStall:
      hosts_[e.a]->on_stall_event(e.b, e.time);
      break;
    case EventKind::kHostApp:
      hosts_[e.a]->on_app(e.time);
      break;
    case EventKind::kLinkState: {
      const FailureSpec& f = scenario_.failures[e.a];
      fabric_.set_link_state(static_cast<uint32_t>(fabric_.find_link(f.link)), f.up, e.time, scenario_.failover_ns,
                             f.direction);
      break;
    }
    default:
      fabric_.handle(e);
      break;
  }
}

bool Simulation::all_done() const noexcept {
  // A measurement window: done once its messages are (the rest is background).
  if (scenario_.workload.windowed()) return totals_.measured_completed >= totals_.measured;
  const uint64_t settled = totals_.completed + totals_.errors;
  if (settled < totals_.messages) return false;
  // SEND: the receivers must have checked every message too.
  return !opt_.send_op || totals_.verified + totals_.mismatches >= totals_.messages;
}

bool Simulation::step_until(uint64_t until) {
  while (!events_.empty() && events_.top().time <= until) {
    Event e = events_.pop();
    now_ = e.time;
    ++events_run_;
    ++events_by_kind_[static_cast<unsigned>(e.kind) & 15];
    dispatch(e);
  }
  return !events_.empty();
}

RunResult Simulation::run() {
  std::string reason = "stalled";
  while (!events_.empty()) {
    if (events_.top().time > scenario_.stop_ns) {
      reason = "time limit";
      break;
    }
    Event e = events_.pop();
    now_ = e.time;
    ++events_run_;
    ++events_by_kind_[static_cast<unsigned>(e.kind) & 15];
    dispatch(e);
    if (all_done()) {
      reason = "done";
      break;
    }
  }
  return collect(reason);
}

uint64_t max_base_bdp_bytes(const Fabric& fabric, uint32_t mtu, double host_gbps) {
  const std::vector<uint32_t> reps = edge_representatives(fabric);
  uint64_t rtt = 0;
  for (uint32_t a : reps) {
    for (uint32_t b : reps) {
      // Hosts under one edge switch reach each other through it alone.
      const uint32_t dst = a == b ? (b + 1 < fabric.host_count() ? b + 1 : b - 1) : b;
      if (dst == a) continue;
      const PathSum s = path_sum(fabric, a, dst, write_frame_bytes(mtu, false, false));
      if (s.ok) rtt = std::max(rtt, 2 * s.delay_ns + s.frame_ns);
    }
  }
  return static_cast<uint64_t>(static_cast<double>(rtt) * host_gbps / 8);
}

double Simulation::ideal_fct_ns(uint32_t src, uint32_t dst, uint64_t bytes) const {
  const bool irn = opt_.mode == Reliability::kIrn;
  const PathSum s = path_sum(fabric_, src, dst, write_frame_bytes(opt_.mtu, false, irn));
  if (!s.ok) return 0;
  uint64_t wire = 0;
  for (uint64_t off = 0; off < bytes || off == 0; off += opt_.mtu) {
    wire += write_frame_bytes(std::min<uint64_t>(opt_.mtu, bytes - off), off == 0, irn);
    if (bytes == 0) break;
  }
  return static_cast<double>(2 * s.delay_ns + s.frame_ns) +
         static_cast<double>(wire) * 8e9 / static_cast<double>(s.slowest_bps);
}

std::vector<SlowdownBucket> Simulation::slowdown_buckets() const {
  // As HPCC's fct_analysis.py: (slowdown, size) sorted by size, cut into
  // step% of the flows each; percentile p of a bucket is its sorted
  // slowdowns' element int(n * p).
  struct Item {
    uint64_t bytes;
    double slowdown;
  };
  std::vector<Item> items;
  items.reserve(totals_.done.size());
  for (const MessageDone& d : totals_.done) {
    const Conn& c = conns_[d.conn];
    const uint64_t bytes = c.sizes[d.msg];
    const double ideal = ideal_fct_ns(c.src, c.dst, bytes);
    const double sl = ideal > 0 ? static_cast<double>(d.fct_ns) / ideal : 0;
    items.push_back(Item{bytes, std::max(1.0, sl)});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.bytes < b.bytes; });
  std::vector<SlowdownBucket> out;
  const std::size_t n = items.size();
  const uint32_t step = scenario_.slowdown_step_pct;
  if (n == 0 || step == 0) return out;
  std::vector<double> v;
  for (uint32_t i = 0; i < 100; i += step) {
    const std::size_t l = i * n / 100, r = (i + step) * n / 100;
    if (r <= l) continue;
    v.clear();
    for (std::size_t k = l; k < r; ++k) v.push_back(items[k].slowdown);
    std::sort(v.begin(), v.end());
    auto pct = [&](double p) { return v[std::min(v.size() - 1, static_cast<std::size_t>(static_cast<double>(v.size()) * p))]; };
    out.push_back(SlowdownBucket{items[r - 1].bytes, static_cast<uint32_t>(r - l), pct(0.5), pct(0.95), pct(0.99)});
  }
  return out;
}

RunResult Simulation::collect(const std::string& stop_reason) const {
  RunResult r;
  r.policy = policy_.name;
  r.seed = seed_;
  r.stop_reason = stop_reason;
  r.messages = scenario_.workload.windowed() ? totals_.measured : totals_.messages;
  r.completed = totals_.completed;
  r.error_completions = totals_.errors;
  r.bytes = totals_.bytes;
  r.data_mismatches = totals_.mismatches;
  r.data_ok = totals_.errors == 0 && totals_.mismatches == 0 &&
              (scenario_.workload.windowed()
                   ? totals_.measured_completed == totals_.measured && totals_.verified == totals_.completed
                   : totals_.completed == totals_.messages && totals_.verified == totals_.messages);
  if (!totals_.fct_ns.empty()) {
    long double sum = 0;
    for (uint64_t v : totals_.fct_ns) sum += v;
    r.fct_us_mean = static_cast<double>(sum / totals_.fct_ns.size()) / 1000.0;
    r.fct_us_p50 = percentile(totals_.fct_ns, 0.50) / 1000.0;
    r.fct_us_p99 = percentile(totals_.fct_ns, 0.99) / 1000.0;
    r.fct_us_max = percentile(totals_.fct_ns, 1.0) / 1000.0;
  }
  if (totals_.last_completion_ns > totals_.first_post_ns && totals_.first_post_ns != ~0ull) {
    r.goodput_gbps = static_cast<double>(totals_.bytes) * 8.0 /
                     static_cast<double>(totals_.last_completion_ns - totals_.first_post_ns);
  }
  r.sim_time_us = static_cast<double>(now_) / 1000.0;
  r.events = events_run_;
  for (unsigned k = 0; k < 16; ++k) r.events_by_kind.push_back(events_by_kind_[k]);
  if (scenario_.slowdown_step_pct != 0) r.slowdown = slowdown_buckets();
  // Time to first byte: from when a connection was to start to its first
  // data at the responder (a gate's wait included).
  std::vector<uint64_t> ttfb;
  for (const Conn& c : conns_) {
    const uint64_t at = hosts_[c.dst]->first_rx_ns(c.dst_qpn);
    if (at != 0 && c.measured) ttfb.push_back(at - c.start_ns);
  }
  r.ttfb_conns = ttfb.size();
  if (!ttfb.empty()) {
    r.ttfb_us_p50 = percentile(ttfb, 0.5) / 1000.0;
    r.ttfb_us_p99 = percentile(ttfb, 0.99) / 1000.0;
    r.ttfb_us_max = percentile(ttfb, 1.0) / 1000.0;
  }
  if (gate_) r.gate_json = gate_->report_json();
  for (const auto& h : hosts_) {
    const NicCounters& n = h->nic();
    r.data_pkts += n.data_pkts;
    r.retx_pkts += n.retx_pkts;
    r.retx_bytes += n.retx_bytes;
    r.rx_rejected += n.rx_rejected + n.rx_parse_drops;
    r.reorder_depth_max = std::max(r.reorder_depth_max, n.reorder_depth_max);
    r.host_stalls += n.stalls;
    r.host_stalled_us += static_cast<double>(n.stalled_ns) / 1000.0;
    r.rx_ring_drops += n.rx_ring_drops;
    r.rx_backlog_max = std::max(r.rx_backlog_max, n.rx_backlog_max);
  }
  for (const Conn& c : conns_) {
    // A bidirectional workload's reverse connections: the same QPs, counted
    // once (as receivers) with the forward ones; their senders' paths below.
    for (auto [host, qpn] : {std::pair{c.src, c.src_qpn}, std::pair{c.dst, c.dst_qpn}}) {
      if (c.twin >= 0) break;
      const QpCounters* q = hosts_[host]->transport().qp_counters(qpn);
      if (q == nullptr) continue;
      r.timeouts += q->timeouts;
      r.naks += q->naks_tx;
      r.sacks += q->sacks_tx;
      r.cnps += q->cnp_rx;
      r.core_reorder_depth_max = std::max(r.core_reorder_depth_max, q->reorder_depth_max);
    }
    const PathPolicy* rp = c.twin >= 0 ? nullptr : hosts_[c.dst]->transport().path_policy(c.dst_qpn);
    if (rp != nullptr) {
      for (uint32_t i = 0; i < rp->path_count(); ++i) {
        r.ack_losses += rp->path_stats(i).ack_losses;
        r.ack_path_removals += rp->path_stats(i).removals;
      }
    }
    const Transport& st = hosts_[c.src]->transport();
    if (const PathPolicy* pp = st.path_policy(c.src_qpn)) {
      std::vector<uint64_t> per_path;
      for (uint32_t i = 0; i < pp->path_count(); ++i) {
        const PathStats ps = pp->path_stats(i);
        per_path.push_back(ps.pkts);
        r.path_removals += ps.removals;
        r.path_returns += ps.returns;
        r.path_losses += ps.losses;
        r.path_loss_removals += ps.loss_removals;
        r.path_silent_removals += ps.silent_removals;
        r.path_stall_excused += ps.stall_excused;
        r.last_path_return_us = std::max(r.last_path_return_us, static_cast<double>(ps.last_returned_ns) / 1000.0);
        if (ps.first_removed_ns) {
          const double t = static_cast<double>(ps.first_removed_ns) / 1000.0;
          if (r.first_path_removal_us == 0 || t < r.first_path_removal_us) r.first_path_removal_us = t;
        }
      }
      if (r.qp_path_pkts.size() < 64) r.qp_path_pkts.push_back(std::move(per_path));
    }
    if (const CcPolicy* cp = st.cc_policy(c.src_qpn)) {
      const CcStats cs = cp->stats();
      r.credits_received += cs.credits_received;
      r.credits_used += cs.credits_used;
      r.credit_stalls += cs.credit_stalls;
      r.rate_cuts += cs.rate_cuts;
      if (cs.min_rate_gbps > 0 && (r.min_rate_gbps == 0 || cs.min_rate_gbps < r.min_rate_gbps))
        r.min_rate_gbps = cs.min_rate_gbps;
    }
  }
  for (const auto& h : hosts_) r.credits_granted += h->transport().credits_granted();
  for (const auto& h : hosts_) r.credit_kicks += h->transport().credit_kicks();
  for (const auto& h : hosts_) r.credit_kicks_excused += h->transport().credit_kicks_excused();
  for (const auto& h : hosts_) r.loop_gaps += h->transport().loop_gaps();
  const FabricStats fs = fabric_.stats();
  r.drops = fs.drops();
  r.drops_queue = fs.drops_queue;
  r.drops_loss = fs.drops_loss;
  r.drops_link_down = fs.drops_down;
  r.drops_no_route = fs.drops_no_route;
  r.ecn_marks = fs.ecn_marks;
  r.max_queue_bytes = fs.max_queue_bytes;
  if (scenario_.topology.kind == TopologySpec::Kind::kParallel) {
    const std::size_t n = scenario_.topology.paths.size();
    std::vector<int> links;
    for (std::size_t i = 0; i < n; ++i) {
      const int link = fabric_.find_link("path" + std::to_string(i));
      links.push_back(link);
      // The first port of a link is the forward (s0 -> s1) direction.
      const PortStats& fwd = fabric_.ports()[fabric_.links()[link].ports[0]].stats;
      const PortStats& rev = fabric_.ports()[fabric_.links()[link].ports[1]].stats;
      r.path_frames.push_back(fwd.tx_frames);
      r.path_lost_fwd.push_back(fwd.drops_down + fwd.drops_loss + fwd.drops_queue);
      r.path_lost_rev.push_back(rev.drops_down + rev.drops_loss + rev.drops_queue);
    }
    // Which path a sender QP's i-th source port takes, by tracing its route.
    r.path_removals_per_path.assign(n, 0);
    r.path_silent_removals_per_path.assign(n, 0);
    r.path_loss_removals_per_path.assign(n, 0);
    r.path_stall_excused_per_path.assign(n, 0);
    r.path_first_removal_us.assign(n, 0);
    r.ack_path_removals_per_path.assign(n, 0);
    for (const Conn& c : conns_) {
      const PathPolicy* rp = c.twin >= 0 ? nullptr : hosts_[c.dst]->transport().path_policy(c.dst_qpn);
      for (uint32_t i = 0; rp != nullptr && i < rp->path_count(); ++i) {
        const uint64_t removals = rp->path_stats(i).removals;
        if (removals == 0) continue;
        for (uint32_t port : trace_route(fabric_, c.dst, c.src, rp->path_port(i))) {
          const auto k = std::find(links.begin(), links.end(), static_cast<int>(fabric_.ports()[port].link));
          if (k != links.end()) r.ack_path_removals_per_path[k - links.begin()] += removals;
        }
      }
      const PathPolicy* pp = hosts_[c.src]->transport().path_policy(c.src_qpn);
      if (pp == nullptr) continue;
      for (uint32_t i = 0; i < pp->path_count(); ++i) {
        const PathStats ps = pp->path_stats(i);
        if (ps.removals == 0 && ps.stall_excused == 0) continue;
        for (uint32_t port : trace_route(fabric_, c.src, c.dst, pp->path_port(i))) {
          const auto k = std::find(links.begin(), links.end(), static_cast<int>(fabric_.ports()[port].link));
          if (k == links.end()) continue;
          r.path_removals_per_path[k - links.begin()] += ps.removals;
          r.path_silent_removals_per_path[k - links.begin()] += ps.silent_removals;
          r.path_loss_removals_per_path[k - links.begin()] += ps.loss_removals;
          r.path_stall_excused_per_path[k - links.begin()] += ps.stall_excused;
          double& first = r.path_first_removal_us[k - links.begin()];
          const double at = static_cast<double>(ps.first_removed_ns) / 1000.0;
          if (ps.first_removed_ns && (first == 0 || at < first)) first = at;
        }
      }
    }
  }
  return r;
}

std::vector<RunResult> run_scenario(const Scenario& scenario, uint64_t seed, const GateFactory& gate) {
  std::vector<RunResult> out;
  for (const PolicySpec& p : scenario.policies) {
    Simulation sim(scenario, p, seed, gate);
    out.push_back(sim.run());
  }
  return out;
}

}  // namespace tandem::rnic::sim
