#include "dpu/fleet/fleet_apply.h"

namespace tandem::dpu::fleet {

FleetBatch next_batch(std::deque<FleetBatch>& q, std::size_t max_events) {
  FleetBatch b = std::move(q.front());
  q.pop_front();
  if (b.snapshot) return b;
  while (!q.empty() && !q.front().snapshot && b.events.size() + q.front().events.size() <= max_events) {
    for (FleetEvent& e : q.front().events) b.events.push_back(std::move(e));
    b.revision = q.front().revision;
    q.pop_front();
  }
  return b;
}

std::vector<Applied> FleetApplier::apply(const FleetBatch& b, Level1State& s, Store& store) {
  std::vector<Applied> out;
  // A watch resumed from disk never goes back; a repeated batch is not applied twice.
  if (!b.snapshot && b.revision <= revision_) {
    ++stats_.stale_batches;
    return out;
  }
  ++stats_.batches;
  Touched t;
  if (b.snapshot) {
    ++stats_.snapshots;
    desired_.clear();
    t.all = true;
  }
  for (const FleetEvent& e : b.events) {
    if (e.value)
      desired_.put(e.key, *e.value, t);
    else
      desired_.del(e.key, t);
  }
  Plan plan = plan_changes(desired_, server_, s, t);
  stats_.unsupported += plan.unsupported.size();
  if (!plan.unsupported.empty()) stats_.last_error = plan.unsupported.back();
  std::vector<Change> done;
  for (Change& c : plan.changes) {
    std::optional<Vnic> removed;
    if (auto* rv = std::get_if<RemoveVnic>(&c))
      if (const Vnic* v = s.vnic(rv->id)) removed = *v;
    ModelResult r = s.apply(c);  // checks first; a refused change changes nothing
    if (!r.ok()) {
      ++stats_.changes_rejected;
      stats_.last_error = "revision " + std::to_string(b.revision) + ": " + r.message;
      continue;
    }
    done.push_back(c);
    out.push_back(Applied{std::move(c), std::move(removed)});
  }
  store.persist(done, FleetRevision{server_, b.revision});
  revision_ = b.revision;
  stats_.changes_applied += done.size();
  if (b.snapshot) stats_.resync_changes += done.size();
  return out;
}

}  // namespace tandem::dpu::fleet
