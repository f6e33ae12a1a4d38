// Punted misses: each one resolved from level 1 into a change set for the
// RNIC its flow belongs to, within its tenant's flow quota there; answers
// (committed or aborted transactions) persisted, and a committed resolution
// undone if level 1 changed since it was made.
#include <algorithm>

#include "dpu/agent/agent_core.h"
#include "dpu/txn/derive.h"

namespace tandem::dpu {

bool AgentCore::take_outcomes(AgentLink& l, uint64_t now) {
  bool did = false;
  for (TxnOutcome& o : l.ch->take_outcomes()) {
    did = true;
    if (tracing()) [[unlikely]] trace_commit(l, o, now);
    if (o.committed) {
      try {
        // A replay re-sends the whole shadow: store all of it (its net effect
        // against the shadow is empty, and replace_all would wipe the store).
        if (o.replay)
          store_.save_level2(l.name, o.version, o.digest.value, l.ch->shadow().snapshot(), {}, true);
        else
          store_.save_level2(l.name, o.version, o.digest.value, o.net_puts, o.net_dels, false);
      } catch (const StoreError& e) {
        ++l.save_errors;
        log("RNIC " + l.name + ": saving level-2 v" + std::to_string(o.version) + " failed: " + e.what(), true);
      }
    }
    for (uint64_t tag : o.tags) {
      const PendingPunts::Entry* pp = l.pending.find(tag);
      if (!pp) continue;
      const uint32_t vni = tenant_of(pp->missed);
      if (o.committed) {
        revalidate(l, *pp);
      } else if (!o.replay) {
        // Refused by itself (the channel splits a refused merge until the
        // change set that does not fit is alone): charged to its own tenant.
        ++l.punts.install_refused;
        l.fair.note_install_refused(vni);
      }
      if (auto it = l.inflight.find(vni); it != l.inflight.end() && it->second) --it->second;
      l.pending.erase(tag);
    }
  }
  return did;
}

// The tenant a missed key is charged to: its local vNIC's (egress keys), 0 if none.
uint32_t AgentCore::tenant_of(const common::EntryKey& k) const {
  if (k.kind != common::EntryKind::kEgress) return 0;
  const Vnic* v = state_.vnic(k.word0);
  return v ? v->vni : 0;
}

// Whether tenant vni may install one more flow on `to` (its fair share).
bool AgentCore::within_quota(AgentLink& to, uint32_t vni) {
  const Tenant* t = state_.tenant(vni);
  uint64_t quota = t && t->flow_quota ? t->flow_quota : cfg_.tenant_flow_quota;
  if (quota == 0) quota = std::max<uint32_t>(1, to.ch->table_capacity() / 4);
  return to.inflight[vni] + flows_on(to, vni) < quota;
}

// Tenant vni's flows (egress entries) that `l`'s RNIC has committed.
uint64_t AgentCore::flows_on(const AgentLink& l, uint32_t vni) const {
  uint64_t n = 0;
  for (uint32_t id : state_.vnics_of(vni)) {
    const Vnic* v = state_.vnic(id);
    if (v && v->rnic == l.name) n += l.ch->shadow().egress_of_vnic(id);
  }
  return n;
}

// A resolution committed: undo it if level 1 changed meanwhile (derive.h).
void AgentCore::revalidate(AgentLink& l, const PendingPunts::Entry& pp) {
  if (!needs_revalidation(state_, pp.level1_generation)) return;  // level 1 unchanged since it was resolved
  revalidate_puts_.assign(pp.installs().begin(), pp.installs().end());  // reused: no allocation per flow
  ChangeSet undo = revalidate_resolution(state_, l.ch->shadow(), l.name, pp.missed, revalidate_puts_);
  if (undo.ops.empty()) return;
  ++l.punts.revoked;
  submit(l, std::move(undo));
}

void AgentCore::resolve_punt(AgentLink& l, uint32_t vni, const common::PuntMsg& p) {
  using common::trace::SetupVerdict;
  ++l.punts.received;
  // Where the punt ended, for a trace rule (agent_resolve records).
  const common::Level2Entry* resolved = nullptr;
  SetupVerdict verdict = SetupVerdict::kRefused;
  struct Traced {
    AgentCore& a;
    const AgentLink& l;
    const common::EntryKey& missed;
    const common::Level2Entry*& resolved;
    SetupVerdict& verdict;
    ~Traced() {
      if (a.tracing()) [[unlikely]] a.trace_resolve(l, missed, resolved, verdict);
    }
  } traced{*this, l, p.missed, resolved, verdict};
  // The key travels in the message; the slot only carries the headers for
  // diagnostics, so a reused slot does not lose the punt.
  uint8_t hdr[2048];
  std::size_t len = 0;
  if (p.length && l.file) {
    const auto r = l.file->view().read_slot(p.slot, p.generation, hdr, sizeof(hdr), len);
    if (r == common::ChannelView::SlotRead::kReused) ++l.punts.slot_lost;
    if (r == common::ChannelView::SlotRead::kOutOfRange) {  // no honest worker sends that
      violation(l, "punt names a slot beyond the slot area", now_);
      return;
    }
  }
  if (l.pending.contains(p.missed)) {
    ++l.punts.duplicate;
    verdict = SetupVerdict::kDuplicate;
    return;
  }
  ResolveStatus why = ResolveStatus::kOk;
  const uint64_t tag = next_tag_++;
  std::optional<ChangeSet> cs = change_set_for_miss(state_, p.missed, tag, &target_, &why, &l.ch->shadow(), &l.pending);
  if (!cs) {
    ++l.punts.refused;
    if (why == ResolveStatus::kDeniedByIsolation) {
      ++l.punts.denied;
      verdict = SetupVerdict::kDenied;
    }
    return;
  }
  // A vNIC of another RNIC: only a confused or compromised worker punts it.
  // Resolved, it filled the other RNIC's table and tenant quota at this one's will.
  if (target_ != l.name) {
    ++l.punts.refused;
    ++l.punts.foreign;
    verdict = SetupVerdict::kForeignVnic;
    return;
  }
  if (vni != 0 && !within_quota(l, vni)) {
    ++l.punts.refused;
    ++l.punts.over_quota;
    verdict = SetupVerdict::kOverQuota;
    l.fair.note_over_quota(vni);
    return;
  }
  ++l.punts.resolved;
  ++l.inflight[vni];
  l.pending.add(p.missed, *cs, state_.generation());
  if (tracing()) [[unlikely]] {
    verdict = SetupVerdict::kOk;
    resolved_entry_ = egress_put(*cs, p.missed);
    resolved = resolved_entry_ ? &*resolved_entry_ : nullptr;
  }
  l.ch->submit(std::move(*cs));
}

}  // namespace tandem::dpu
