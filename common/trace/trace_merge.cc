#include "common/trace/trace_merge.h"

#include <algorithm>
#include <cmath>

namespace tandem::common::trace {

const char* outcome_name(Outcome o) noexcept {
  switch (o) {
    case Outcome::kDelivered: return "delivered";
    case Outcome::kDuplicate: return "duplicate";
    case Outcome::kDropped: return "dropped";
    case Outcome::kInFlight: return "in_flight";
    case Outcome::kUnknown: return "unknown";
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
  uint32_t copy = 0;
  const Event* last_tx = nullptr;
  const Event* accepted = nullptr;
  const Event* dup = nullptr;
  const Event* last_drop = nullptr;
  for (Event& e : t.events) {
    if (e.r.stage == Stage::kTx) {
      e.copy = ++copy;
      last_tx = &e;
      continue;
    }
    e.copy = copy;
    if (e.r.stage == Stage::kRxCore && e.r.verdict == 0 && !accepted) accepted = &e;
    if (e.r.stage == Stage::kRxCore && e.r.verdict != 0 && namer(e.r.stage, e.r.verdict) == "duplicate") dup = &e;
    if (is_drop(e.r)) {
      last_drop = &e;
      ++t.drops;
      ++m.drops_at[std::string(stage_name(e.r.stage)) + "/" + namer(e.r.stage, e.r.verdict)];
    }
  }
  t.copies = copy;
  t.foreign = copy == 0 && !t.events.empty();
  t.first_ns = t.events.empty() ? 0 : t.events.front().t_ns;
  t.end_ns = t.events.empty() ? 0 : t.events.back().t_ns;
  if (accepted) {
    t.outcome = Outcome::kDelivered;
    t.end_ns = accepted->t_ns;
    // The hops of the copy that got through: tx -> each later stage of it.
    const Event* prev = nullptr;
    for (const Event& e : t.events) {
      if (e.copy != accepted->copy || e.t_ns > accepted->t_ns) continue;
      if (prev) m.hops[std::string(stage_name(prev->r.stage)) + ">" + std::string(stage_name(e.r.stage))]
                    .push_back(e.t_ns - prev->t_ns);
      prev = &e;
    }
  } else if (dup && (!last_drop || last_drop == dup)) {
    t.outcome = Outcome::kDuplicate;
  } else if (last_drop && (!last_tx || last_drop->t_ns >= last_tx->t_ns)) {
    t.outcome = Outcome::kDropped;
    t.drop = static_cast<int>(last_drop - t.events.data());
  } else if (last_tx) {
    t.outcome = Outcome::kInFlight;
  }
}

}  // namespace

Merged merge(const std::vector<RingDump>& rings, VerdictNamer namer) {
  Merged m;
  std::map<PacketKey, Timeline> by_key;
  for (const RingDump& d : rings)
    for (const Record& r : d.records) {
      ++m.records;
      const PacketKey k{r.src_ip, r.dst_ip, r.dqpn & 0xFFFFFF, r.psn & 0xFFFFFF, r.opcode};
      Timeline& t = by_key[k];
      t.key = k;
      const int64_t t_ns = static_cast<int64_t>(r.ts_ns) + d.clock_offset_ns;
      t.events.push_back(Event{static_cast<uint64_t>(std::max<int64_t>(0, t_ns)), d.process, r, 0});
    }
  m.packets.reserve(by_key.size());
  for (auto& [k, t] : by_key) {
    // Same time: the order the stages come in on the way (tx before fabric
    // before rx), as clocks of different processes may tie.
    std::stable_sort(t.events.begin(), t.events.end(), [](const Event& a, const Event& b) {
      return a.t_ns != b.t_ns ? a.t_ns < b.t_ns : a.r.stage < b.r.stage;
    });
    m.packets.push_back(std::move(t));
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
  return m;
}

}  // namespace tandem::common::trace
