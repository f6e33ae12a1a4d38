#include "sim/dpu_gate.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include <nlohmann/json.hpp>

#include "dpu/txn/derive.h"
#include "rnic/table/key_hash.h"
#include "rnic/sim/fabric.h"
#include "rnic/sim/rng.h"
#include "rnic/sim/scenario.h"

namespace tandem::sim {

using rnic::sim::Conn;
using rnic::sim::ScenarioError;

struct DpuGate::Rnic {
  uint32_t host = 0;
  uint32_t server = 0;
  uint32_t slot = 0;  // its index among its server's RNICs (the agent's link)
  std::unique_ptr<rnic::Level2Table> table;
  std::unique_ptr<rnic::RnicChannel> ch;
  common::Bar bar{};
  MsgLink up;    // RNIC -> agent (events, punts)
  MsgLink down;  // agent -> RNIC (commands)
  // Egress keys connections wait for, and which connection ends (conn * 2 +
  // side; | kGone: a started end whose route vanished). No ends: the storm's.
  struct Waiting {
    common::EntryKey key;
    std::vector<uint32_t> ends;
    uint64_t punted_at = 0;
    bool punted = false;
    uint64_t since = 0;  // when the first end began to wait
    bool gone = false;   // a started connection's route vanished (not a first miss)
  };
  std::vector<Waiting> waiting;
  bool headless = false;
};

struct DpuGate::Link {
  uint32_t host = 0;
  std::string name;
  std::unique_ptr<dpu::AgentChannel> ch;
  dpu::FairPunts fair;
  dpu::PendingPunts pending;
  std::map<uint32_t, uint64_t> inflight;  // per tenant: resolutions submitted, not answered yet
  uint64_t vnic_session = 0;
  // The agent's store for this RNIC: the last committed level-2 table, what
  // a restarted agent reloads (and reconciles by digest instead of a replay).
  uint64_t stored_version = 0;
  std::unordered_map<common::EntryKey, common::Level2Entry, dpu::EntryKeyHash> stored;
  explicit Link(std::size_t punt_limit) : fair(punt_limit) {}
};

struct DpuGate::Agent {
  uint32_t server = 0;
  bool up = true;
  dpu::Level1State state;
  std::vector<Link> links;
  std::deque<std::pair<uint32_t, common::RawMessage>> inbox;  // (link, message) delivered, not handled yet
  std::unordered_map<uint64_t, uint64_t> punt_arrival;        // missed key -> when its punt reached the agent
  uint64_t busy_until = 0;
  bool run_pending = false;
  uint64_t next_tag = 1;
  std::size_t rr = 0;        // link whose punts are served next
  uint64_t clock = 0;        // the latest time its channels were given: never goes back
  uint64_t queued = 0;       // punts waiting in the links' fair queues
  dpu::AgentChannelStats closed{};  // channels of earlier incarnations (restarts)
};

namespace {

uint64_t key_word(const common::EntryKey& k) noexcept {
  return (uint64_t{k.word0} << 32 | k.word1) ^ (uint64_t{static_cast<uint8_t>(k.kind)} << 61);
}

common::MacAddr mac_of(uint32_t host) noexcept {
  return {0x02, 0x54, static_cast<uint8_t>(host >> 16), static_cast<uint8_t>(host >> 8),
          static_cast<uint8_t>(host), 0x01};
}

void add_stats(dpu::AgentChannelStats& into, const dpu::AgentChannelStats& s) {
  into.hellos += s.hellos;
  into.replays += s.replays;
  into.reconcile_skips += s.reconcile_skips;
  into.txns_committed += s.txns_committed;
  into.txns_aborted += s.txns_aborted;
  into.table_full += s.table_full;
  into.degraded += s.degraded;
  into.resets += s.resets;
  into.refusals_split += s.refusals_split;
  into.split_txns += s.split_txns;
  into.change_sets_refused += s.change_sets_refused;
}

double pct(std::vector<uint64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  rank = std::clamp<std::size_t>(rank, 1, v.size());
  return static_cast<double>(v[rank - 1]);
}

}  // namespace

DpuGate::DpuGate(rnic::sim::Simulation& sim, DpuSpec spec) : sim_(sim), spec_(std::move(spec)) {
  const uint32_t hosts = sim_.host_count();
  if (hosts % spec_.rnics_per_server != 0) {
    throw ScenarioError("dpu: " + std::to_string(hosts) + " hosts are not whole servers of " +
                        std::to_string(spec_.rnics_per_server) + " RNICs");
  }
  for (const DpuSpec::Restart& r : spec_.restarts) {
    if (r.server >= hosts / spec_.rnics_per_server) throw ScenarioError("dpu.restarts[]: no such server");
  }
  const uint64_t seed = sim_.seed();
  rnics_.reserve(hosts);
  for (uint32_t h = 0; h < hosts; ++h) {
    auto r = std::make_unique<Rnic>();
    r->host = h;
    r->server = h / spec_.rnics_per_server;
    r->slot = h % spec_.rnics_per_server;
    rnic::Level2TableConfig tc;
    tc.capacity = spec_.table_capacity;
    // Each RNIC's secret, as a worker draws it at start.
    tc.hash_key = rnic::TableHashKey{rnic::sim::derive_seed(seed, 0x7AB1E000 + h),
                                     rnic::sim::derive_seed(seed, 0x5EC2E000 + h)};
    r->table = std::make_unique<rnic::Level2Table>(tc);
    rnic::RnicChannelConfig cc;
    cc.agent_timeout_ns = spec_.agent_timeout_ns;
    cc.rnic_instance = h + 1;
    r->ch = std::make_unique<rnic::RnicChannel>(*r->table, cc);
    rnics_.push_back(std::move(r));
  }
  // Every connection's group must be a whole tenant on hosts that have a vNIC of it.
  for (const Conn& c : sim_.conns()) {
    const rnic::sim::ConnGroup& g = sim_.groups()[sim_.conn_group(c.index)];
    for (uint32_t h : {c.src, c.dst}) {
      if (h < g.first_host || h >= g.first_host + g.host_count) throw ScenarioError("dpu: a flow leaves its group");
    }
  }
  conn_wait_.assign(sim_.conns().size(), 0);
  conn_asked_.assign(sim_.conns().size(), 0);
  end_version_.assign(sim_.conns().size() * 2, ~uint64_t{0});
  end_gone_at_.assign(sim_.conns().size() * 2, 0);
  qpn_end_.resize(hosts);
  for (const Conn& c : sim_.conns()) {
    qpn_end_[c.src].emplace(c.src_qpn, c.index * 2);
    qpn_end_[c.dst].emplace(c.dst_qpn, c.index * 2 + 1);
  }
  tallies_.resize(sim_.groups().size() + spec_.storms.size());
  for (const DpuSpec::Storm& st : spec_.storms) {
    if (st.rnic >= hosts || st.from >= hosts) throw ScenarioError("dpu.storms[]: rnic and from must be hosts of the fabric");
    if (st.victim_group >= sim_.groups().size()) throw ScenarioError("dpu.storms[].victim_group: no such workload");
    storms_.push_back(Storm{st, static_cast<uint32_t>(sim_.groups().size() + storms_.size()), {}, {}, 0, {}});
    craft_storm(storms_.back());
  }
  const uint32_t servers = hosts / spec_.rnics_per_server;
  agents_.resize(servers);
  for (uint32_t s = 0; s < servers; ++s) {
    agents_[s] = std::make_unique<Agent>();
    agents_[s]->server = s;
    build_agent(s, 0);
    // The loops start together; their timers tick from t = 0.
    sim_.schedule_gate(0, s, kTick);
  }
  for (const DpuSpec::Restart& r : spec_.restarts) {
    sim_.schedule_gate(r.at_ns, r.server, kRestartDown);
    sim_.schedule_gate(r.at_ns + r.down_ns, r.server, kRestartUp);
    restart_logs_.push_back(RestartLog{r, 0, 0, 0, 0, 0});
  }
  for (uint32_t k = 0; k < storms_.size(); ++k)
    for (uint32_t i = 0; i < storms_[k].ips.size(); ++i)
      sim_.schedule_gate(storms_[k].spec.at_ns + i * storms_[k].spec.interval_ns, k << 20 | i, kStorm);
}

void DpuGate::craft_storm(Storm& s) {
  // The attacker's model of the target table: the table itself (it knows the
  // secret), the same geometry under the unkeyed hash (what crafted keys did
  // to the table before it was keyed), or none (consecutive addresses).
  const DpuSpec::Storm& st = s.spec;
  const rnic::Level2Table& real = *rnics_[st.rnic]->table;
  std::unique_ptr<rnic::Level2Table> unkeyed;
  const rnic::Level2Table* model = &real;
  if (st.aim == DpuSpec::Storm::Aim::kUnkeyed) {
    rnic::Level2TableConfig tc;
    tc.capacity = spec_.table_capacity;
    tc.hash = [](const common::EntryKey& k) noexcept { return rnic::unkeyed_hash(k); };
    unkeyed = std::make_unique<rnic::Level2Table>(tc);
    model = unkeyed.get();
  }
  // Its targets: the victim group's egress entries on the RNIC (the vNIC id
  // and peers' addresses are assumed known: the worst case).
  const uint32_t vg = st.victim_group;
  for (const Conn& c : sim_.conns()) {
    if (sim_.conn_group(c.index) != vg) continue;
    for (uint32_t side = 0; side < 2; ++side) {
      if ((side == 0 ? c.src : c.dst) != st.rnic) continue;
      const common::EntryKey k = end_key(c.index, side);
      if (std::find(s.targets.begin(), s.targets.end(), k) == s.targets.end()) s.targets.push_back(k);
    }
  }
  uint32_t flows = st.flows;
  if (flows == 0) flows = spec_.tenant_flow_quota ? spec_.tenant_flow_quota : std::max<uint32_t>(1, spec_.table_capacity / 4);
  const uint32_t vnic = vnic_id(s.group, st.rnic);
  const uint32_t first = 0x0A000001u, last = 0x0AFFFFFEu;  // its VPC, 10.0.0.0/8
  if (st.aim == DpuSpec::Storm::Aim::kNone) {
    for (uint32_t i = 0; i < flows; ++i) s.ips.push_back(first + i);
    s.tries = flows;
    return;
  }
  // Addresses whose two buckets are both among the targets' (wherever the
  // two-choice placement puts them, they fill a target's bucket), as the
  // attacker's model predicts the placement: a bucket it expects full (eight
  // slots) is aimed at no more.
  // Per bucket: entries it expects there, or kOff for a bucket not aimed at.
  constexpr uint32_t kSlots = rnic::Level2Table::kSlotsPerBucket, kOff = ~0u;
  std::vector<uint32_t> load(model->buckets(), kOff);
  uint32_t open = 0;  // aimed buckets it does not expect full yet
  for (const common::EntryKey& k : s.targets) {
    uint32_t b1, b2;
    model->buckets_for(k, b1, b2);
    for (uint32_t b : {b1, b2})
      if (load[b] == kOff) {
        load[b] = 0;
        ++open;
      }
  }
  for (uint32_t ip = first; ip <= last && s.ips.size() < flows && open > 0; ++ip) {
    ++s.tries;
    uint32_t b1, b2;
    model->buckets_for(common::egress_key(vnic, ip), b1, b2);
    if (load[b1] == kOff || load[b2] == kOff || (load[b1] >= kSlots && load[b2] >= kSlots)) continue;
    const uint32_t b = load[b2] < load[b1] ? b2 : (load[b1] < kSlots ? b1 : b2);
    if (++load[b] == kSlots) --open;
    s.ips.push_back(ip);
  }
}

void DpuGate::storm_send(Storm& s, uint32_t i, uint64_t now) {
  // The attacker's first packet to address i misses (its flow's QP needs the
  // route, as a victim's does); the worker punts it and asks again later.
  Rnic& r = *rnics_[s.spec.rnic];
  const common::EntryKey key = common::egress_key(vnic_id(s.group, r.host), s.ips[i]);
  if (i == 0) {
    // What the other tenants hold on the RNIC as the storm begins (none may be evicted).
    for (const Conn& c : sim_.conns())
      for (uint32_t side = 0; side < 2; ++side) {
        if ((side == 0 ? c.src : c.dst) != r.host) continue;
        const common::EntryKey k = end_key(c.index, side);
        if (lookup(r, k) && std::find(s.before.begin(), s.before.end(), k) == s.before.end()) s.before.push_back(k);
      }
  }
  if (lookup(r, key)) return;
  wait_for(r, key, ~0u, now);
}

common::EntryKey DpuGate::end_key(uint32_t conn, uint32_t side) const {
  const Conn& c = sim_.conns()[conn];
  const uint32_t host = side == 0 ? c.src : c.dst, peer = side == 0 ? c.dst : c.src;
  return common::egress_key(vnic_id(sim_.conn_group(conn), host), overlay_ip(peer));
}

void DpuGate::wait_for(Rnic& r, const common::EntryKey& key, uint32_t end, uint64_t now) {
  auto it = std::find_if(r.waiting.begin(), r.waiting.end(), [&](const Rnic::Waiting& w) { return w.key == key; });
  if (it == r.waiting.end()) {
    r.waiting.push_back(Rnic::Waiting{key, {}, 0, false, now, false});
    it = r.waiting.end() - 1;
  }
  if (end != ~0u) it->ends.push_back(end);
  if (end != ~0u && (end & kGone)) it->gone = true;
  // The worker punts a miss only to an agent that is there and serving.
  if (!it->punted && r.ch->state() == common::RnicChannelState::kActive) punt(r, key, now);
}

TenantTally* DpuGate::tally(uint32_t vni) {
  if (vni < 100 || vni - 100 >= tallies_.size()) return nullptr;
  return &tallies_[vni - 100];
}

DpuGate::RestartLog* DpuGate::restart_of(uint32_t server, uint64_t now) {
  // The latest restart of the server that began by now.
  RestartLog* found = nullptr;
  for (RestartLog& l : restart_logs_)
    if (l.spec.server == server && l.spec.at_ns <= now && (!found || l.spec.at_ns >= found->spec.at_ns)) found = &l;
  return found;
}

bool DpuGate::egress_ok(uint32_t host, uint32_t qpn, uint64_t now) {
  auto it = qpn_end_[host].find(qpn);
  if (it == qpn_end_[host].end()) return true;
  const uint32_t end = it->second;
  Rnic& r = *rnics_[host];
  // The worker resolves a QP's route again only when the table version moved.
  const uint64_t v = r.table->version();
  if (end_version_[end] == v) return true;
  const common::EntryKey key = end_key(end / 2, end % 2);
  if (lookup(r, key)) {
    end_version_[end] = v;
    return true;
  }
  ++stats_.route_miss_drops;
  RestartLog* rl = restart_of(r.server, now);
  if (rl) ++rl->drops;
  if (end_gone_at_[end] == 0) {
    end_gone_at_[end] = now;
    ++stats_.routes_lost;
    if (rl) ++rl->routes_lost;
    wait_for(r, key, end | kGone, now);
  }
  return false;
}

void DpuGate::route_restored(uint32_t end, uint64_t now) {
  if (end_gone_at_[end] == 0) return;
  const uint64_t gone = now - end_gone_at_[end];
  stats_.route_gone_ns_max = std::max(stats_.route_gone_ns_max, gone);
  const Conn& c = sim_.conns()[end / 2];
  if (RestartLog* rl = restart_of((end % 2 == 0 ? c.src : c.dst) / spec_.rnics_per_server, now))
    rl->gone_ns_max = std::max(rl->gone_ns_max, gone);
  end_gone_at_[end] = 0;
}

DpuGate::~DpuGate() = default;

dpu::AgentChannelConfig DpuGate::channel_config(uint32_t instance) const {
  dpu::AgentChannelConfig c;
  c.agent_instance = instance;
  c.hello_timeout_ns = spec_.heartbeat_timeout_ns;
  c.heartbeat_interval_ns = spec_.heartbeat_interval_ns;
  c.heartbeat_timeout_ns = spec_.heartbeat_timeout_ns;
  c.txn_timeout_ns = spec_.txn_timeout_ns;
  c.degraded_reset_ns = spec_.heartbeat_timeout_ns;
  c.pipeline = true;  // as tandem-dpu runs it
  return c;
}

void DpuGate::build_agent(uint32_t server, uint64_t now) {
  Agent& a = *agents_[server];
  const uint32_t first = server * spec_.rnics_per_server, last = first + spec_.rnics_per_server;
  const bool fresh = a.links.empty();
  if (fresh) {
    // Level 1 (what the agent's store holds): its RNICs, the tenants whose
    // groups have hosts here, their vNICs here (each maps its own address)
    // and the mappings of their other hosts.
    auto apply = [&](const dpu::Change& c) {
      const dpu::ModelResult r = a.state.apply(c);
      if (!r.ok()) throw ScenarioError("dpu: level 1 refused a change: " + r.message);
    };
    for (uint32_t h = first; h < last; ++h) {
      apply(dpu::AddRnic{"h" + std::to_string(h), rnic::sim::host_ip(h), mac_of(h), 0xC000, 1});
    }
    const auto& groups = sim_.groups();
    for (uint32_t g = 0; g < groups.size(); ++g) {
      const uint32_t g0 = groups[g].first_host, g1 = g0 + groups[g].host_count;
      if (g1 <= first || g0 >= last) continue;
      apply(dpu::AddTenant{vni_of(g), "t" + std::to_string(g)});
      for (uint32_t h = std::max(g0, first); h < std::min(g1, last); ++h) {
        apply(dpu::AddVnic{vnic_id(g, h), vni_of(g), "h" + std::to_string(h), overlay_ip(h), mac_of(h)});
      }
      a.state.reserve_mappings(a.state.mappings().size() + (g1 - g0));
      for (uint32_t x = g0; x < g1; ++x) {
        if (x >= first && x < last) continue;  // a local vNIC maps its own address
        apply(dpu::AddMapping{vni_of(g), overlay_ip(x), rnic::sim::host_ip(x), mac_of(x), "h" + std::to_string(x)});
      }
    }
    for (const Storm& s : storms_) {
      const DpuSpec::Storm& st = s.spec;
      const bool has_rnic = st.rnic >= first && st.rnic < last, has_from = st.from >= first && st.from < last;
      if (!has_rnic && !has_from) continue;
      // The hostile tenant: a vNIC on each of its two RNICs; its VPC's
      // addresses all live behind `from` (many VMs, or secondary IPs, there).
      const uint32_t g = s.group;
      apply(dpu::AddTenant{vni_of(g), "attacker" + std::to_string(g)});
      for (uint32_t h : {st.rnic, st.from})
        if (h >= first && h < last) apply(dpu::AddVnic{vnic_id(g, h), vni_of(g), "h" + std::to_string(h), overlay_ip(h), mac_of(h)});
      if (has_rnic) {
        a.state.reserve_mappings(a.state.mappings().size() + s.ips.size());
        for (uint32_t ip : s.ips)
          apply(dpu::AddMapping{vni_of(g), ip, rnic::sim::host_ip(st.from), mac_of(st.from), "h" + std::to_string(st.from)});
      }
    }
    for (uint32_t h = first; h < last; ++h) {
      a.links.emplace_back(spec_.punt_queue_limit);
      a.links.back().host = h;
      a.links.back().name = "h" + std::to_string(h);
    }
  }
  // A (re)started agent: a new instance, channels from the store's tables.
  const uint32_t instance = ++instances_;
  for (Link& l : a.links) {
    dpu::Level2Shadow shadow;
    std::vector<common::Level2Entry> entries;
    entries.reserve(l.stored.size());
    for (const auto& [k, e] : l.stored) entries.push_back(e);
    // Stored order is a hash map's: sort so a run does not depend on it.
    std::sort(entries.begin(), entries.end(), [](const common::Level2Entry& x, const common::Level2Entry& y) {
      return key_word(x.key) < key_word(y.key);
    });
    shadow.reset(l.stored_version, entries);
    l.ch = std::make_unique<dpu::AgentChannel>(l.name, channel_config(instance), std::move(shadow));
    l.ch->start(now);
    l.fair = dpu::FairPunts(spec_.punt_queue_limit);
    l.pending = dpu::PendingPunts();
    l.inflight.clear();
    l.vnic_session = 0;
  }
  a.up = true;
  a.inbox.clear();
  a.punt_arrival.clear();
  a.queued = 0;
  a.busy_until = now;
  a.clock = now;
}

bool DpuGate::lookup(Rnic& r, const common::EntryKey& k) const noexcept {
  return r.table->lookup(r.table->begin_read(), k) != nullptr;
}

bool DpuGate::admit(const Conn& c, uint64_t now) {
  const uint32_t g = sim_.conn_group(c.index);
  uint8_t mask = 0;
  for (uint32_t side = 0; side < 2; ++side) {
    const uint32_t host = side == 0 ? c.src : c.dst, peer = side == 0 ? c.dst : c.src;
    Rnic& r = *rnics_[host];
    const common::EntryKey key = common::egress_key(vnic_id(g, host), overlay_ip(peer));
    if (lookup(r, key)) continue;
    mask |= static_cast<uint8_t>(1u << side);
    wait_for(r, key, c.index * 2 + side, now);
  }
  if (mask == 0) {
    ++stats_.admitted_at_once;
    return true;
  }
  conn_wait_[c.index] = mask;
  conn_asked_[c.index] = now;
  ++waiting_conns_;
  return false;
}

void DpuGate::punt(Rnic& r, const common::EntryKey& k, uint64_t now) {
  for (Rnic::Waiting& w : r.waiting) {
    if (!(w.key == k)) continue;
    if (w.punted) ++stats_.repunts;
    w.punted = true;
    w.punted_at = now;
  }
  // The headers would go to a slot for diagnostics; the key is all the agent needs.
  r.ch->punt(0, 0, 0, 0, k);
  send_up(r, now);
}

void DpuGate::send_up(Rnic& r, uint64_t now) {
  common::RawMessage m;
  while (r.ch->pop_event(m)) {
    const uint64_t at = r.up.send(now, m, spec_.channel_latency_ns, spec_.channel_gbps);
    ++stats_.messages_up;
    sim_.schedule_gate(at, r.host, kDeliverUp);
  }
}

void DpuGate::send_down(Link& l, uint64_t now) {
  Rnic& r = *rnics_[l.host];
  common::RawMessage m;
  while (l.ch->pop_command(m)) {
    const uint64_t at = r.down.send(now, m, spec_.channel_latency_ns, spec_.channel_gbps);
    ++stats_.messages_down;
    sim_.schedule_gate(at, r.host, kDeliverDown);
  }
}

void DpuGate::deliver_up(uint32_t host, uint64_t now) {
  Rnic& r = *rnics_[host];
  const common::RawMessage m = r.up.q.front().m;
  r.up.q.pop_front();
  Agent& a = *agents_[r.server];
  if (!a.up) return;  // nobody reads the ring; the RNIC will time the agent out
  if (m.type() == common::MessageType::kPunt) {
    const auto p = common::as<common::PuntMsg>(m);
    a.punt_arrival.emplace(key_word(p.missed), now);
  }
  a.inbox.emplace_back(r.slot, m);
  wake_agent(a, now);
}

void DpuGate::deliver_down(uint32_t host, uint64_t now) {
  Rnic& r = *rnics_[host];
  const common::RawMessage m = r.down.q.front().m;
  r.down.q.pop_front();
  const uint64_t version = r.table->version();
  r.ch->on_command(m, now);
  send_up(r, now);
  if (r.table->version() != version) recheck(r, now);
}

void DpuGate::recheck(Rnic& r, uint64_t now) {
  // A commit: the worker looks its waiting QPs' routes up again.
  for (std::size_t i = 0; i < r.waiting.size();) {
    if (!lookup(r, r.waiting[i].key)) {
      ++i;
      continue;
    }
    const std::vector<uint32_t> ends = std::move(r.waiting[i].ends);
    const uint64_t since = r.waiting[i].since;
    const bool gone = r.waiting[i].gone;
    r.waiting[i] = std::move(r.waiting.back());
    r.waiting.pop_back();
    // A wait the restart caused: begun while the agent was down, or a route
    // that vanished (its table was wiped) after it.
    RestartLog* rl = ends.empty() ? nullptr : restart_of(r.server, now);
    if (rl && since >= rl->spec.at_ns && (gone || since <= rl->spec.at_ns + rl->spec.down_ns)) rl->last_route_at = now;
    for (uint32_t e : ends) {
      if (e & kGone) {
        route_restored(e & ~kGone, now);
      } else {
        end_ready(e / 2, e % 2, now);
      }
    }
  }
}

void DpuGate::end_ready(uint32_t conn, uint32_t side, uint64_t now) {
  uint8_t& w = conn_wait_[conn];
  if (!(w & (1u << side))) return;
  w = static_cast<uint8_t>(w & ~(1u << side));
  if (w != 0) return;
  --waiting_conns_;
  ++stats_.released;
  gate_wait_ns_.push_back(now - conn_asked_[conn]);
  sim_.release(conn, now);
}

void DpuGate::wake_agent(Agent& a, uint64_t now) {
  if (a.run_pending || !a.up) return;
  a.run_pending = true;
  sim_.schedule_gate(std::max(now, a.busy_until), a.server, kAgentRun);
}

uint32_t DpuGate::tenant_of(const Agent& a, const common::EntryKey& k) const {
  if (k.kind != common::EntryKind::kEgress) return 0;
  const dpu::Vnic* v = a.state.vnic(k.word0);
  return v ? v->vni : 0;
}

void DpuGate::agent_run(uint32_t server, uint64_t at) {
  Agent& a = *agents_[server];
  a.run_pending = false;
  if (!a.up) return;
  const uint64_t now = std::max(at, a.clock);
  uint64_t cost = 0;
  // Its loop: the channels' events first (each one's handling costs time)...
  while (!a.inbox.empty()) {
    auto [li, m] = a.inbox.front();
    a.inbox.pop_front();
    a.links[li].ch->on_event(m, now);
    cost += spec_.event_ns;
  }
  for (Link& l : a.links) {
    if (l.ch->session() != l.vnic_session) {
      // A new session: the RNIC's vNIC entries become level 1's (v3).
      l.vnic_session = l.ch->session();
      dpu::ChangeSet cs = dpu::changes_for_vnics(a.state, l.ch->shadow(), l.name);
      if (!cs.ops.empty()) {
        cs.tag = a.next_tag++;
        l.ch->submit(std::move(cs));
      }
    }
    for (dpu::TxnOutcome& o : l.ch->take_outcomes()) {
      if (o.committed) {
        // What the store keeps (tandem-dpu's save_level2).
        if (o.replay) {
          l.stored.clear();
          for (const common::Level2Entry& e : l.ch->shadow().snapshot()) l.stored[e.key] = e;
        } else {
          for (const common::Level2Entry& e : o.net_puts) l.stored[e.key] = e;
          for (const common::EntryKey& k : o.net_dels) l.stored.erase(k);
        }
        l.stored_version = o.version;
      }
      for (uint64_t tag : o.tags) {
        const dpu::PendingPunts::Entry* pp = l.pending.find(tag);
        if (pp == nullptr) continue;
        if (!o.committed) {
          if (TenantTally* t = tally(tenant_of(a, pp->missed))) ++t->aborted;
        }
        auto it = l.inflight.find(tenant_of(a, pp->missed));
        if (it != l.inflight.end() && it->second) --it->second;
        l.pending.erase(tag);
      }
    }
    for (const common::PuntMsg& p : l.ch->take_punts()) {
      ++stats_.punts;
      if (TenantTally* t = tally(tenant_of(a, p.missed))) ++t->punts;
      if (l.fair.push(tenant_of(a, p.missed), p)) {
        ++a.queued;
      } else {
        ++stats_.punts_dropped;
      }
    }
  }
  stats_.queue_max = std::max(stats_.queue_max, a.queued);
  // ... then one punt, the links taking turns (each link's queue is fair
  // between its tenants); one per run so each resolution ends at its own time.
  for (std::size_t k = 0; k < a.links.size(); ++k) {
    Link& l = a.links[(a.rr + k) % a.links.size()];
    if (l.fair.empty()) continue;
    a.rr = (a.rr + k + 1) % a.links.size();
    const uint64_t start = now + cost;
    l.fair.serve(1, [&](uint32_t vni, const common::PuntMsg& p) {
      auto at = a.punt_arrival.find(key_word(p.missed));
      if (at != a.punt_arrival.end()) {
        const uint64_t w = start - at->second;
        stats_.wait_sum_ns += w;
        stats_.wait_max_ns = std::max(stats_.wait_max_ns, w);
        ++stats_.waited;
        a.punt_arrival.erase(at);
      }
      resolve(a, l, vni, p, start);
    });
    --a.queued;
    cost += spec_.resolve_ns;
    break;
  }
  // Commands leave as the loop produces them (its channel service ticks
  // every pass: that starts the next transaction).
  for (Link& l : a.links) {
    const uint64_t before = stats_.messages_down;
    l.ch->tick(now + cost);
    send_down(l, now + cost);
    cost += spec_.command_ns * (stats_.messages_down - before);
  }
  a.busy_until = now + cost;
  a.clock = now + cost;
  stats_.busy_ns += cost;
  if (RestartLog* rl = restart_of(server, now); rl && rl->active_at == 0 && now >= rl->spec.at_ns + rl->spec.down_ns) {
    bool all = true;
    for (const Link& l : a.links) all = all && l.ch->state() == dpu::ChannelState::kActive;
    if (all) rl->active_at = now + cost;
  }
  if (!a.inbox.empty() || a.queued > 0) wake_agent(a, now);
}

bool DpuGate::within_quota(Agent& a, Link& to, uint32_t vni) const {
  const dpu::Tenant* t = a.state.tenant(vni);
  uint64_t quota = t && t->flow_quota ? t->flow_quota : spec_.tenant_flow_quota;
  if (quota == 0) quota = std::max<uint32_t>(1, to.ch->table_capacity() / 4);
  uint64_t flows = 0;
  for (uint32_t id : a.state.vnics_of(vni)) {
    const dpu::Vnic* v = a.state.vnic(id);
    if (v && v->rnic == to.name) flows += to.ch->shadow().egress_of_vnic(id);
  }
  return to.inflight[vni] + flows < quota;
}

void DpuGate::resolve(Agent& a, Link& l, uint32_t vni, const common::PuntMsg& p, uint64_t) {
  // As tandem-dpu's resolve_punt: one resolution per missed key in flight,
  // level 1 decides (or isolation refuses), a vNIC of another RNIC is
  // refused, the tenant's quota on the RNIC, then a change set for its channel.
  if (l.pending.contains(p.missed)) {
    ++stats_.duplicates;
    return;
  }
  dpu::ResolveStatus why = dpu::ResolveStatus::kOk;
  std::string target;
  const uint64_t tag = a.next_tag++;
  std::optional<dpu::ChangeSet> cs =
      dpu::change_set_for_miss(a.state, p.missed, tag, &target, &why, &l.ch->shadow(), &l.pending);
  if (!cs || target != l.name) {
    ++stats_.refused;
    return;
  }
  Link* to = &l;
  TenantTally* t = tally(vni);
  if (vni != 0 && !within_quota(a, *to, vni)) {
    ++stats_.refused;
    ++stats_.over_quota;
    if (t) ++t->over_quota;
    l.fair.note_over_quota(vni);
    return;
  }
  ++stats_.resolved;
  if (t) ++t->resolved;
  ++to->inflight[vni];
  to->pending.add(p.missed, *cs, a.state.generation());
  to->ch->submit(std::move(*cs));
}

void DpuGate::tick(uint32_t server, uint64_t now) {
  Agent& a = *agents_[server];
  for (Link& l : a.links) {
    Rnic& r = *rnics_[l.host];
    // The RNIC's loop: heartbeat, agent-silence check, its BAR.
    r.ch->tick(now);
    r.ch->publish(r.bar);
    send_up(r, now);
    if (r.ch->state() == common::RnicChannelState::kHeadless && !r.headless) {
      r.headless = true;
      ++stats_.headless;
    } else if (r.ch->state() != common::RnicChannelState::kHeadless) {
      r.headless = false;
    }
    // Misses not punted yet (the agent was not serving) or waiting too long.
    if (r.ch->state() == common::RnicChannelState::kActive) {
      for (std::size_t i = 0; i < r.waiting.size(); ++i) {
        Rnic::Waiting& w = r.waiting[i];
        if (!w.punted || now - w.punted_at >= spec_.repunt_ns) punt(r, w.key, now);
      }
    }
  }
  if (a.up) {
    // The agent's loop: BAR reads and the channels' timers (while it works
    // off a queue of punts, they run when that pass is done).
    const uint64_t t = std::max(now, a.clock);
    a.clock = t;
    for (Link& l : a.links) {
      l.ch->on_bar(dpu::sample_bar(rnics_[l.host]->bar), t);
      l.ch->tick(t);
      send_down(l, t);
    }
    wake_agent(a, now);  // a new session or outcomes may be waiting
  }
  sim_.schedule_gate(now + spec_.tick_ns, server, kTick);
}

void DpuGate::on_event(const rnic::sim::Event& e) {
  switch (static_cast<Kind>(e.b)) {
    case kDeliverUp:
      deliver_up(e.a, e.time);
      break;
    case kDeliverDown:
      deliver_down(e.a, e.time);
      break;
    case kAgentRun:
      agent_run(e.a, e.time);
      break;
    case kTick:
      tick(e.a, e.time);
      break;
    case kRestartDown: {
      Agent& a = *agents_[e.a];
      for (Link& l : a.links) add_stats(a.closed, l.ch->stats());
      a.up = false;
      a.inbox.clear();
      const RestartLog* rl = restart_of(e.a, e.time);
      if (rl && rl->spec.store_lost) {
        // Its level-2 store goes with it: the next agent starts from empty shadows.
        for (Link& l : a.links) {
          l.stored.clear();
          l.stored_version = 0;
        }
      }
      break;
    }
    case kRestartUp:
      build_agent(e.a, e.time);
      break;
    case kStorm:
      storm_send(storms_[e.a >> 20], e.a & 0xFFFFF, e.time);
      break;
  }
}

bool DpuGate::all_active() const noexcept {
  for (const auto& a : agents_) {
    if (!a->up) return false;
    for (const Link& l : a->links)
      if (l.ch->state() != dpu::ChannelState::kActive) return false;
  }
  return true;
}

uint64_t DpuGate::table_entries(uint32_t host) const noexcept { return rnics_[host]->table->size(); }

std::string DpuGate::report_json() const {
  using nlohmann::ordered_json;
  dpu::AgentChannelStats ch{};
  for (const auto& a : agents_) {
    add_stats(ch, a->closed);
    for (const Link& l : a->links) add_stats(ch, l.ch->stats());
  }
  uint64_t entries = 0, entries_max = 0, full_buckets = 0, full_capacity = 0;
  for (const auto& r : rnics_) {
    entries += r->table->size();
    entries_max = std::max<uint64_t>(entries_max, r->table->size());
    full_buckets += r->table->stats().full_buckets;
    full_capacity += r->table->stats().full_capacity;
  }
  const double t = static_cast<double>(std::max<uint64_t>(1, sim_.now()));
  ordered_json j;
  j["servers"] = agents_.size();
  j["rnics"] = rnics_.size();
  j["punts"] = stats_.punts;
  j["resolved"] = stats_.resolved;
  j["refused"] = stats_.refused;
  j["over_quota"] = stats_.over_quota;
  j["duplicates"] = stats_.duplicates;
  j["punts_dropped"] = stats_.punts_dropped;
  j["repunts"] = stats_.repunts;
  j["agent_queue_max"] = stats_.queue_max;
  j["agent_wait_us_mean"] = stats_.waited ? static_cast<double>(stats_.wait_sum_ns) / stats_.waited / 1000.0 : 0;
  j["agent_wait_us_max"] = static_cast<double>(stats_.wait_max_ns) / 1000.0;
  j["agent_busy_fraction"] = static_cast<double>(stats_.busy_ns) / (t * static_cast<double>(agents_.size()));
  j["txns_committed"] = ch.txns_committed;
  j["txns_aborted"] = ch.txns_aborted;
  j["refusals_split"] = ch.refusals_split;  // refused merges sent again in pieces (dpu/channel)
  j["split_txns"] = ch.split_txns;
  j["change_sets_refused"] = ch.change_sets_refused;
  j["table_full"] = ch.table_full;
  j["table_full_buckets"] = full_buckets;
  j["table_full_capacity"] = full_capacity;
  j["table_entries"] = entries;
  j["table_entries_max"] = entries_max;
  j["hellos"] = ch.hellos;
  j["replays"] = ch.replays;
  j["reconcile_skips"] = ch.reconcile_skips;
  j["degraded"] = ch.degraded;
  {
    auto& errs = j["channel_errors"] = ordered_json::array();
    for (const auto& a : agents_)
      for (const Link& l : a->links)
        if (!l.ch->last_error().empty() && errs.size() < 8) errs.push_back(l.name + ": " + l.ch->last_error());
  }
  j["rnics_headless"] = stats_.headless;
  j["messages_up"] = stats_.messages_up;
  j["messages_down"] = stats_.messages_down;
  j["conns_admitted_at_once"] = stats_.admitted_at_once;
  j["conns_released"] = stats_.released;
  j["conns_still_waiting"] = waiting_conns_;
  j["route_wait_us_p50"] = pct(gate_wait_ns_, 0.5) / 1000.0;
  j["route_wait_us_p99"] = pct(gate_wait_ns_, 0.99) / 1000.0;
  j["route_wait_us_max"] = pct(gate_wait_ns_, 1.0) / 1000.0;
  j["route_miss_drops"] = stats_.route_miss_drops;
  j["routes_lost"] = stats_.routes_lost;
  j["route_gone_us_max"] = static_cast<double>(stats_.route_gone_ns_max) / 1000.0;
  // Time to first byte per workload group (tenant).
  std::vector<std::vector<uint64_t>> ttfb(sim_.groups().size());
  std::vector<uint64_t> asked(sim_.groups().size(), 0);
  for (const Conn& c : sim_.conns()) {
    const uint32_t g = sim_.conn_group(c.index);
    ++asked[g];
    const uint64_t at = sim_.first_byte_ns(c.index);
    if (at != 0) ttfb[g].push_back(at - c.start_ns);
  }
  auto& groups = j["groups"] = ordered_json::array();
  for (uint32_t g = 0; g < ttfb.size(); ++g) {
    groups.push_back({{"group", g},
                      {"vni", vni_of(g)},
                      {"first_host", sim_.groups()[g].first_host},
                      {"hosts", sim_.groups()[g].host_count},
                      {"conns", asked[g]},
                      {"first_bytes", ttfb[g].size()},
                      {"ttfb_us_p50", pct(ttfb[g], 0.5) / 1000.0},
                      {"ttfb_us_p99", pct(ttfb[g], 0.99) / 1000.0},
                      {"ttfb_us_max", pct(ttfb[g], 1.0) / 1000.0},
                      {"punts", tallies_[g].punts},
                      {"resolved", tallies_[g].resolved},
                      {"over_quota", tallies_[g].over_quota},
                      {"aborted", tallies_[g].aborted}});
  }
  if (!restart_logs_.empty()) {
    auto& rs = j["restarts"] = ordered_json::array();
    for (const RestartLog& l : restart_logs_) {
      const uint64_t up = l.spec.at_ns + l.spec.down_ns;
      uint64_t still = 0;  // connection ends on its RNICs still without a route at the end
      for (uint32_t h = l.spec.server * spec_.rnics_per_server; h < (l.spec.server + 1) * spec_.rnics_per_server; ++h)
        for (const Rnic::Waiting& w : rnics_[h]->waiting) still += w.ends.size();
      const auto after_up = [&](uint64_t t) { return t > up ? static_cast<double>(t - up) / 1000.0 : 0.0; };
      rs.push_back({{"server", l.spec.server},
                    {"down_at_us", static_cast<double>(l.spec.at_ns) / 1000.0},
                    {"up_at_us", static_cast<double>(up) / 1000.0},
                    {"store", l.spec.store_lost ? "lost" : "kept"},
                    // From the agent's start: its channels all ACTIVE (tables agreed or replayed) ...
                    {"resync_us", l.active_at ? after_up(l.active_at) : -1.0},
                    // ... and the last route its RNICs' connections waited for because of it.
                    {"routes_done_us", after_up(l.last_route_at)},
                    {"reprogrammed_us", l.active_at ? after_up(std::max(l.active_at, l.last_route_at)) : -1.0},
                    {"routes_lost", l.routes_lost},
                    {"route_gone_us_max", static_cast<double>(l.gone_ns_max) / 1000.0},
                    {"route_miss_drops", l.drops},
                    {"ends_still_waiting", still}});
    }
  }
  if (!storms_.empty()) {
    auto& out = j["storms"] = ordered_json::array();
    for (const Storm& s : storms_) {
      const DpuSpec::Storm& st = s.spec;
      const rnic::Level2Table& t = *rnics_[st.rnic]->table;
      const auto snap = t.begin_read();
      uint64_t installed = 0, targets_in = 0, lost = 0;
      for (uint32_t ip : s.ips) installed += t.lookup(snap, common::egress_key(vnic_id(s.group, st.rnic), ip)) != nullptr;
      for (const common::EntryKey& k : s.targets) targets_in += t.lookup(snap, k) != nullptr;
      for (const common::EntryKey& k : s.before) lost += t.lookup(snap, k) == nullptr;
      // The victim group's connections through the RNIC, and how many of them got a first byte.
      uint64_t v_conns = 0, v_started = 0;
      std::vector<uint64_t> v_ttfb;
      for (const Conn& c : sim_.conns()) {
        if (sim_.conn_group(c.index) != st.victim_group || (c.src != st.rnic && c.dst != st.rnic)) continue;
        ++v_conns;
        if (const uint64_t at = sim_.first_byte_ns(c.index)) {
          ++v_started;
          v_ttfb.push_back(at - c.start_ns);
        }
      }
      const TenantTally& at = tallies_[s.group];
      const TenantTally& vt = tallies_[st.victim_group];
      out.push_back({{"rnic", st.rnic},
                     {"aim", aim_name(st.aim)},
                     {"victim_group", st.victim_group},
                     {"addresses", s.ips.size()},
                     {"addresses_tried", s.tries},
                     {"attacker_punts", at.punts},
                     {"attacker_resolved", at.resolved},
                     {"attacker_over_quota", at.over_quota},
                     {"attacker_aborted", at.aborted},
                     {"attacker_installed", installed},
                     {"victim_targets", s.targets.size()},
                     {"victim_targets_installed", targets_in},
                     {"victim_conns", v_conns},
                     {"victim_conns_started", v_started},
                     {"victim_ttfb_us_p50", pct(v_ttfb, 0.5) / 1000.0},
                     {"victim_ttfb_us_max", pct(v_ttfb, 1.0) / 1000.0},
                     {"victim_punts", vt.punts},
                     {"victim_aborted", vt.aborted},
                     {"entries_before", s.before.size()},
                     {"entries_before_lost", lost},
                     {"table_entries", t.size()},
                     {"table_capacity", t.capacity()},
                     {"table_buckets", t.buckets()},
                     {"table_puts", t.stats().puts},
                     {"table_full_buckets", t.stats().full_buckets},
                     {"table_full_capacity", t.stats().full_capacity},
                     {"table_aborts", t.stats().aborts}});
    }
  }
  return j.dump();
}

rnic::sim::GateFactory dpu_gate_factory() {
  return [](rnic::sim::Simulation& sim) -> std::unique_ptr<rnic::sim::ConnGate> {
    const rnic::sim::Scenario& s = sim.scenario();
    if (s.dpu_yaml.empty()) return nullptr;  // no dpu: section, no DPU in the loop
    return std::make_unique<DpuGate>(sim, parse_dpu_spec(s.dpu_yaml, s.name));
  };
}

}  // namespace tandem::sim
