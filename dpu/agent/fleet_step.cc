// Fleet mode (dpu/fleet): a batch of etcd's desired state applied through
// the same check -> persist -> apply path as tandemctl's changes, then
// handed to the RNICs like them (the mapping ones together: one pass over
// each RNIC's shadow for the whole batch, not one per mapping).
#include "dpu/agent/agent_core.h"
#include "dpu/txn/derive.h"

namespace tandem::dpu {

bool AgentCore::apply_fleet(const fleet::FleetBatch& b, uint64_t now) {
  if (!fleet_) return false;
  now_ = now;
  std::vector<fleet::Applied> applied = fleet_->apply(b, state_, store_);  // StoreError: the caller stops
  std::vector<MappingKey> withdrawn, replaced;
  for (const fleet::Applied& a : applied) {
    if (const auto* m = std::get_if<AddMapping>(&a.change))
      (m->replace ? replaced : withdrawn).push_back(MappingKey{m->vni, m->overlay_ip});
    else if (const auto* r = std::get_if<RemoveMapping>(&a.change))
      withdrawn.push_back(MappingKey{r->vni, r->overlay_ip});
    else
      changed(a.change, a.removed);
  }
  if (!withdrawn.empty())
    for (auto& [n, l] : links_) submit(*l, deletions_for_mappings(l->ch->shadow(), withdrawn));
  if (!replaced.empty()) mappings_replaced(replaced);
  if (b.snapshot) {
    // A full read (start, or after a compaction): level 1 may have changed
    // while an RNIC did not hear of it (killed between the SQLite commit and
    // the change set): withdraw what level 1 no longer gives.
    for (auto& [n, l] : links_) {
      ChangeSet cs = stale_entries(state_, l->ch->shadow());
      fleet_stale_withdrawn_ += cs.ops.size();
      submit(*l, std::move(cs));
    }
  }
  const fleet::FleetApplyStats& st = fleet_->stats();
  if (st.changes_rejected != fleet_rejected_logged_ || st.unsupported != fleet_unsupported_logged_) {
    log("fleet: revision " + std::to_string(b.revision) + ": " + st.last_error, true);
    fleet_rejected_logged_ = st.changes_rejected;
    fleet_unsupported_logged_ = st.unsupported;
  }
  return true;
}

}  // namespace tandem::dpu
