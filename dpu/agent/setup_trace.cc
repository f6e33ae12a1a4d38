// Trace units for a flow's set-up in the agent (common/trace): where a punt
// ended (agent_resolve) and each transaction that carried resolutions
// (txn_commit), recorded when a rule covers the flow.
#include "dpu/agent/agent_core.h"

namespace tandem::dpu {

// The egress entry a change set puts for `key` (what a resolution installs).
std::optional<common::Level2Entry> AgentCore::egress_put(const ChangeSet& cs, const common::EntryKey& key) {
  for (const auto& op : cs.ops)
    if (!op.del && op.entry.key == key) return op.entry;
  return std::nullopt;
}

// The BTH P_Key of the tenant whose vNIC `vnic_id` is (what a rule's pkey names).
uint16_t AgentCore::wire_pkey_of_vnic(uint32_t vnic_id) const {
  const Vnic* v = state_.vnic(vnic_id);
  const Tenant* t = v ? state_.tenant(v->vni) : nullptr;
  return common::wire_pkey(t ? t->entry_pkey() : 0);
}

uint32_t AgentCore::underlay_of(const std::string& rnic) const {
  const Rnic* r = state_.rnic(rnic);
  return r ? r->underlay_ip : 0;
}

void AgentCore::trace_setup(common::trace::Stage stage, uint32_t src, uint32_t dst, const common::EntryKey& key,
                            common::trace::SetupVerdict verdict, uint32_t aux, uint64_t now) {
  common::trace::Record r;
  r.ts_ns = now;
  r.stage = stage;
  r.src_ip = src;
  r.dst_ip = dst;
  r.dqpn = key.word0;  // the local vNIC
  r.psn = key.word1;   // the remote overlay address
  r.verdict = static_cast<uint8_t>(verdict);
  r.aux = aux;
  tracer_->record(r);
}

// A punt from `l`'s RNIC ended (resolved: the egress entry it installs).
void AgentCore::trace_resolve(const AgentLink& l, const common::EntryKey& missed, const common::Level2Entry* resolved,
                              common::trace::SetupVerdict verdict) {
  if (missed.kind != common::EntryKind::kEgress) return;  // the only kind workers punt
  const common::trace::Rule& rule = tracer_->rule();
  const uint16_t pkey = wire_pkey_of_vnic(missed.word0);
  const uint32_t src = resolved ? resolved->egress.underlay_src_ip : underlay_of(l.name);
  const uint32_t dst = resolved ? resolved->egress.underlay_dst_ip : 0;
  if (dst ? !rule.matches_pair(src, dst, pkey) : !rule.matches_end(src, pkey)) return;
  trace_setup(common::trace::Stage::kAgentResolve, src, dst, missed, verdict, 0, cfg_.clock ? cfg_.clock() : now_);
}

// A transaction on `l`'s RNIC ended: one record per egress entry it put
// that the rule covers (committed: its net puts; aborted: the resolutions
// it carried), with the committed table version.
void AgentCore::trace_commit(const AgentLink& l, const TxnOutcome& o, uint64_t now) {
  if (o.replay) return;  // the whole shadow again, nothing new
  const common::trace::Rule& rule = tracer_->rule();
  const auto verdict = o.committed ? common::trace::SetupVerdict::kOk : common::trace::SetupVerdict::kAborted;
  auto one = [&](const common::Level2Entry& e) {
    if (e.key.kind != common::EntryKind::kEgress) return;
    const common::EgressAction& a = e.egress;
    if (!rule.matches_pair(a.underlay_src_ip, a.underlay_dst_ip, wire_pkey_of_vnic(e.key.word0))) return;
    trace_setup(common::trace::Stage::kTxnCommit, a.underlay_src_ip, a.underlay_dst_ip, e.key, verdict,
                static_cast<uint32_t>(o.version), now);
  };
  if (o.committed) {
    for (const common::Level2Entry& e : o.net_puts) one(e);
    return;
  }
  for (uint64_t tag : o.tags)
    if (const PendingPunts::Entry* pp = l.pending.find(tag))
      for (const common::Level2Entry& e : pp->installs()) one(e);
}

}  // namespace tandem::dpu
