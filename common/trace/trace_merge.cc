#include "common/trace/trace_merge.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace tandem::common::trace {

const char* outcome_name(Outcome o) noexcept {
  switch (o) {
    case Outcome::kDelivered: return "delivered";
    case Outcome::kDuplicate: return "duplicate";
    case Outcome::kDropped: return "dropped";
    case Outcome::kInFlight: return "in_flight";
    case Outcome::kUnknown: return "unknown";
    case Outcome::kEdge: return "edge";
  }
  return "?";
}

const char* setup_outcome_name(SetupOutcome o) noexcept {
  switch (o) {
    case SetupOutcome::kDelivered: return "delivered";
    case SetupOutcome::kFirstLost: return "first_packet_lost";
    case SetupOutcome::kCommitted: return "committed";
    case SetupOutcome::kRefused: return "refused";
    case SetupOutcome::kAborted: return "aborted";
    case SetupOutcome::kPunted: return "punted";
  }
  return "?";
}

uint64_t percentile(std::vector<uint64_t>& xs, double p) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const auto i = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(xs.size()))) ;
  return xs[std::min(xs.size() - 1, i == 0 ? 0 : i - 1)];
}

namespace {

bool is_drop(const Record& r) noexcept {
  return r.stage == Stage::kFabricDrop || (r.verdict != 0 && r.stage != Stage::kTx);
}

void classify(Timeline& t, Merged& m, VerdictNamer namer) {
  const bool edge = !t.events.empty() && (t.events.front().t_ns < m.window_start_ns || t.events.back().t_ns > m.window_end_ns);
  uint32_t copy = 0;
  const Event* last_tx = nullptr;
  const Event* accepted = nullptr;
  const Event* dup = nullptr;
  const Event* last_drop = nullptr;
  for (Event& e : t.events) {
    if (e.r.stage == Stage::kTx) {
      copy = std::max(copy, e.copy);
      last_tx = &e;
      continue;
    }
    if (e.r.stage == Stage::kRxCore && e.r.verdict == 0 && !accepted) accepted = &e;
    if (e.r.stage == Stage::kRxCore && e.r.verdict != 0 && namer(e.r.stage, e.r.verdict) == "duplicate") dup = &e;
    if (is_drop(e.r)) {
      last_drop = &e;
      ++t.drops;
      ++m.drops_at[std::string(stage_name(e.r.stage)) + "/" + namer(e.r.stage, e.r.verdict)];
    }
  }
  t.copies = copy;
  t.foreign = copy == 0 && !t.events.empty() && !edge;
  t.first_ns = t.events.empty() ? 0 : t.events.front().t_ns;
  t.end_ns = t.events.empty() ? 0 : t.events.back().t_ns;
  if (accepted) {
    t.outcome = Outcome::kDelivered;
    t.end_ns = accepted->t_ns;
    // The hops of the copy that got through, along the way a packet goes:
    // the first record of each stage it passed, consecutive ones paired.
    static constexpr Stage kWay[] = {Stage::kTx, Stage::kFabricEnqueue, Stage::kFabricDeliver, Stage::kRxCore};
    const Event* prev = nullptr;
    for (Stage st : kWay) {
      const Event* at = nullptr;
      for (const Event& e : t.events)
        if (e.copy == accepted->copy && e.r.stage == st && e.t_ns <= accepted->t_ns) {
          at = &e;
          break;
        }
      if (!at) continue;
      if (prev && at->t_ns >= prev->t_ns)
        m.hops[std::string(stage_name(prev->r.stage)) + ">" + std::string(stage_name(st))].push_back(at->t_ns - prev->t_ns);
      prev = at;
    }
  } else if (dup && (!last_drop || last_drop == dup)) {
    t.outcome = Outcome::kDuplicate;
  } else if (last_drop && (!last_tx || last_drop->t_ns >= last_tx->t_ns)) {
    t.outcome = Outcome::kDropped;
    t.drop = static_cast<int>(last_drop - t.events.data());
  } else if (edge) {
    t.outcome = Outcome::kEdge;
  } else if (last_tx) {
    t.outcome = Outcome::kInFlight;
  }
}

bool by_time(const Event& a, const Event& b) noexcept {
  return a.t_ns != b.t_ns ? a.t_ns < b.t_ns : a.r.stage < b.r.stage;
}

// Set-up records into set-ups: one per missed entry (RNIC, vNIC, remote
// overlay), a punt after a commit starting another; each linked to the
// first traced packet between the two RNICs after its resolution (the
// packet cannot leave before the RNIC committed it, which the agent may
// learn a moment after the packet left).
void build_setups(std::vector<Event>& recs, Merged& m) {
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::vector<Event>> by_entry;
  for (Event& e : recs) by_entry[{e.r.src_ip, e.r.dqpn, e.r.psn}].push_back(e);
  for (auto& [k, ev] : by_entry) {
    std::stable_sort(ev.begin(), ev.end(), by_time);
    Setup cur;
    bool committed = false;
    auto flush = [&] {
      if (!cur.events.empty()) m.setups.push_back(std::move(cur));
      cur = Setup{};
      committed = false;
    };
    for (const Event& e : ev) {
      if (e.r.stage == Stage::kPunt && committed) flush();
      cur.src_ip = std::get<0>(k);
      cur.vnic = std::get<1>(k);
      cur.overlay = std::get<2>(k);
      if (e.r.dst_ip) cur.dst_ip = e.r.dst_ip;
      if (e.r.stage == Stage::kTxnCommit && e.r.verdict == 0) committed = true;
      cur.events.push_back(e);
    }
    flush();
  }
  for (Setup& s : m.setups) {
    const Event *punt = nullptr, *resolved = nullptr, *refused = nullptr, *commit = nullptr, *aborted = nullptr;
    for (const Event& e : s.events) {
      if (e.r.stage == Stage::kPunt) {
        if (!punt) punt = &e;
        if (e.r.verdict != 0) refused = &e;
      } else if (e.r.stage == Stage::kAgentResolve) {
        if (e.r.verdict == 0 && !resolved) resolved = &e;
        if (e.r.verdict != 0 && e.r.verdict != static_cast<uint8_t>(SetupVerdict::kDuplicate)) refused = &e;
      } else if (e.r.stage == Stage::kTxnCommit) {
        if (e.r.verdict == 0 && !commit) commit = &e;
        if (e.r.verdict != 0) aborted = &e;
      }
    }
    s.first_ns = s.events.front().t_ns;
    s.end_ns = s.events.back().t_ns;
    s.last_setup = static_cast<int>(s.events.size()) - 1;
    if (commit) s.version = commit->r.aux;
    if (punt && resolved && resolved->t_ns >= punt->t_ns)
      m.setup_hops["punt>agent_resolve"].push_back(resolved->t_ns - punt->t_ns);
    if (resolved && commit && commit->t_ns >= resolved->t_ns)
      m.setup_hops["agent_resolve>txn_commit"].push_back(commit->t_ns - resolved->t_ns);
    if (!commit) {
      s.outcome = aborted ? SetupOutcome::kAborted : refused ? SetupOutcome::kRefused : SetupOutcome::kPunted;
      continue;
    }
    const uint64_t after = resolved ? resolved->t_ns : commit->t_ns;
    for (std::size_t i = 0; i < m.packets.size(); ++i) {  // by first record
      const Timeline& t = m.packets[i];
      if (t.key.src_ip != s.src_ip || t.key.dst_ip != s.dst_ip || t.first_ns < after || t.copies == 0) continue;
      s.first_packet = static_cast<int>(i);
      break;
    }
    if (s.first_packet < 0) {
      s.outcome = SetupOutcome::kCommitted;
      continue;
    }
    const Timeline& t = m.packets[static_cast<std::size_t>(s.first_packet)];
    s.outcome = t.outcome == Outcome::kDelivered ? SetupOutcome::kDelivered : SetupOutcome::kFirstLost;
    if (punt && t.outcome == Outcome::kDelivered && t.end_ns >= punt->t_ns)
      m.setup_hops["punt>delivered"].push_back(t.end_ns - punt->t_ns);
    s.events.insert(s.events.end(), t.events.begin(), t.events.end());
    std::stable_sort(s.events.begin() + s.last_setup + 1, s.events.end(), by_time);
    s.end_ns = t.outcome == Outcome::kDelivered ? t.end_ns : s.events.back().t_ns;
  }
  std::sort(m.setups.begin(), m.setups.end(), [](const Setup& a, const Setup& b) { return a.first_ns < b.first_ns; });
  for (const Setup& s : m.setups) ++m.setup_outcomes[setup_outcome_name(s.outcome)];
}

}  // namespace

Merged merge(const std::vector<RingDump>& rings, VerdictNamer namer, const TscCalibration* cal) {
  Merged m;
  std::map<PacketKey, Timeline> by_key;
  std::vector<Event> setup_records;
  // The time each process had packet records: the span of all its rings
  // (one per lcore), as its lcores adopt a rule together.
  std::map<std::string, std::pair<uint64_t, uint64_t>> spans;
  for (const RingDump& d : rings) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const Record& r : d.records) {
      ++m.records;
      const PacketKey k{r.src_ip, r.dst_ip, r.dqpn & 0xFFFFFF, r.psn & 0xFFFFFF, r.opcode};
      int64_t t_ns = static_cast<int64_t>(r.ts_ns) + d.clock_offset_ns;
      if (cal && cal->hz > 0 && d.tsc_mult != 0) {
        const uint64_t cycles = d.tsc_base + static_cast<uint64_t>((static_cast<unsigned __int128>(r.ts_ns) << 32) / d.tsc_mult);
        const double dc = static_cast<double>(static_cast<int64_t>(cycles - cal->anchor_cycles));
        t_ns = cal->anchor_ns + static_cast<int64_t>(dc * 1e9 / cal->hz);
      }
      const auto at = static_cast<uint64_t>(std::max<int64_t>(0, t_ns));
      if (is_setup_stage(r.stage)) {
        setup_records.push_back(Event{at, d.process, r, 0});
        continue;
      }
      Timeline& t = by_key[k];
      t.key = k;
      lo = std::min(lo, at);
      hi = std::max(hi, at);
      t.events.push_back(Event{at, d.process, r, 0});
    }
    if (hi == 0) continue;  // no packet records
    auto [it, fresh] = spans.try_emplace(d.process, lo, hi);
    if (!fresh) it->second = {std::min(it->second.first, lo), std::max(it->second.second, hi)};
  }
  bool first = true;
  for (const auto& [process, span] : spans) {
    m.window_start_ns = first ? span.first : std::max(m.window_start_ns, span.first);
    m.window_end_ns = first ? span.second : std::min(m.window_end_ns, span.second);
    first = false;
  }
  m.packets.reserve(by_key.size());
  for (auto& [k, t] : by_key) {
    // Same time: the order the stages come in on the way (tx before fabric
    // before rx), as clocks of different processes may tie.
    std::stable_sort(t.events.begin(), t.events.end(), [](const Event& a, const Event& b) {
      return a.t_ns != b.t_ns ? a.t_ns < b.t_ns : a.r.stage < b.r.stage;
    });
    // Transmissions: a retransmission is another copy of the packet before
    // it; one not flagged so (a repeated ACK of one PSN) is a packet of its
    // own. Every other record joins the transmission with its IPv4 id; one
    // with none traced (sent before the rule, or by another sender) joins a
    // packet of the untraced.
    std::vector<Timeline> pk;
    std::map<uint16_t, std::pair<std::size_t, uint32_t>> by_id;  // ip id -> (packet, copy)
    for (const Event& e : t.events) {
      if (e.r.stage != Stage::kTx) continue;
      if (pk.empty() || !(e.r.flags & kFlagRetransmit)) {
        pk.emplace_back();
        pk.back().key = k;
      }
      Event x = e;
      x.copy = static_cast<uint32_t>(std::count_if(pk.back().events.begin(), pk.back().events.end(),
                                                    [](const Event& y) { return y.r.stage == Stage::kTx; })) + 1;
      by_id[e.r.ip_id] = {pk.size() - 1, x.copy};
      pk.back().events.push_back(x);
    }
    std::size_t untraced = SIZE_MAX;
    for (const Event& e : t.events) {
      if (e.r.stage == Stage::kTx) continue;
      Event x = e;
      std::size_t at;
      if (auto it = by_id.find(e.r.ip_id); it != by_id.end()) {
        at = it->second.first;
        x.copy = it->second.second;
      } else {
        if (untraced == SIZE_MAX) {
          untraced = pk.size();
          pk.emplace_back();
          pk.back().key = k;
        }
        at = untraced;
        x.copy = 0;
      }
      pk[at].events.push_back(x);
    }
    for (Timeline& p : pk) {
      std::stable_sort(p.events.begin(), p.events.end(), [](const Event& a, const Event& b) {
        return a.t_ns != b.t_ns ? a.t_ns < b.t_ns : a.r.stage < b.r.stage;
      });
      m.packets.push_back(std::move(p));
    }
  }
  for (Timeline& t : m.packets) {
    classify(t, m, namer);
    ++m.outcomes[outcome_name(t.outcome)];
  }
  // Out of order: accepted after a higher PSN of the same QP was accepted.
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, std::vector<std::pair<uint64_t, Timeline*>>> per_qp;
  for (Timeline& t : m.packets)
    if (t.outcome == Outcome::kDelivered) per_qp[{t.key.src_ip, t.key.dst_ip, t.key.dqpn}].push_back({t.end_ns, &t});
  for (auto& [q, v] : per_qp) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    uint32_t highest = 0;
    bool any = false;
    for (auto& [ns, t] : v) {
      const uint32_t psn = t->key.psn;
      if (any && ((highest - psn) & 0xFFFFFF) < 0x800000 && highest != psn) t->out_of_order = true;
      if (!any || ((psn - highest) & 0xFFFFFF) < 0x800000) highest = psn;
      any = true;
    }
  }
  std::sort(m.packets.begin(), m.packets.end(),
            [](const Timeline& a, const Timeline& b) { return a.first_ns < b.first_ns; });
  build_setups(setup_records, m);
  return m;
}

}  // namespace tandem::common::trace
