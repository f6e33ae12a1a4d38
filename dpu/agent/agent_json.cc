// What the agent shows of its RNICs: rnic show / rnic list (rnics()), table
// dump --level 2 (level2()), telemetry snapshots, fleet status.
#include "dpu/agent/agent_core.h"

namespace tandem::dpu {

using nlohmann::json;

namespace {

const char* rnic_state_name(uint64_t s) noexcept {
  switch (static_cast<common::RnicChannelState>(s)) {
    case common::RnicChannelState::kDown: return "down";
    case common::RnicChannelState::kAwaitHello: return "await_hello";
    case common::RnicChannelState::kSync: return "sync";
    case common::RnicChannelState::kActive: return "active";
    case common::RnicChannelState::kHeadless: return "headless";
  }
  return "unknown";
}

constexpr const char* kBarCounterNames[common::kBarCounterCount] = {
    "rx_packets", "tx_packets", "table_hits", "table_misses", "punts",
    "punts_dropped", "table_full", "commits", "aborts", "drops"};

// What the worker's BAR says (values only: nothing in it is used as an address or size).
json bar_json(const common::ChannelView& v) {
  const common::Bar& bar = v.bar();
  json counters = json::object();
  for (std::size_t i = 0; i < common::kBarCounterCount; ++i)
    counters[kBarCounterNames[i]] = bar.counters[i].value.load(std::memory_order_relaxed);
  json jbar = {{"state", rnic_state_name(bar.state.value.load(std::memory_order_relaxed))},
               {"heartbeat", bar.heartbeat.value.load(std::memory_order_relaxed)},
               {"rnic_instance", bar.rnic_instance.value.load(std::memory_order_relaxed)},
               {"negotiated_version", bar.negotiated_version.value.load(std::memory_order_relaxed)},
               {"rnic_pid", v.header().rnic_pid.load(std::memory_order_relaxed)},
               {"counters", counters}};
  std::optional<common::CommittedTable> t;
  for (int i = 0; i < 10000 && !(t = common::bar_read_table(bar)); ++i) {
  }  // writer mid-update (a worker keeping it odd costs this call, not the loop)
  if (t) jbar["table"] = {{"version", t->version}, {"digest", t->digest}, {"entries", t->entry_count}};
  return jbar;
}

const char* rnic_state_of(const AgentLink& l) {
  return l.file ? rnic_state_name(l.file->view().bar().state.value.load(std::memory_order_relaxed)) : "none";
}

}  // namespace

json AgentCore::rnics() const {
  json a = json::array();
  for (const auto& [name, l] : links_) a.push_back(link_json(*l));
  return a;
}

json AgentCore::level2(const std::string& rnic) const {
  auto it = links_.find(rnic);
  if (it == links_.end()) return nullptr;
  const Level2Shadow& s = it->second->ch->shadow();
  json e = json::array();
  for (const common::Level2Entry& x : s.snapshot()) e.push_back(level2_entry_json(x));
  return {{"version", s.version()}, {"digest", s.digest().value}, {"count", s.digest().count}, {"entries", e}};
}

// Per tenant: punts taken, served, dropped (queue full), refused over quota,
// resolutions the RNIC refused (install_refused), and its flows on this RNIC.
json AgentCore::tenant_punts_json(const AgentLink& l) const {
  json t = json::object();
  for (const auto& [vni, st] : l.fair.stats())
    t[std::to_string(vni)] = {{"queued", st.queued}, {"served", st.served}, {"dropped", st.dropped},
                              {"over_quota", st.over_quota}, {"install_refused", st.install_refused},
                              {"flows", flows_on(l, vni)}};
  return t;
}

json AgentCore::link_json(const AgentLink& l) const {
  const AgentChannel& ch = *l.ch;
  json jbar = {{"state", "none"}};  // no file: replaced after a violation, the new one not made yet
  if (l.file) jbar = bar_json(l.file->view());
  const AgentChannelStats& s = ch.stats();
  return {{"name", l.name},
          {"file", opener_.path_of(l.name)},
          {"state", channel_state_name(ch.state())},
          {"protocol_version", ch.version()},
          {"table_version", ch.shadow().version()},
          {"table_entries", ch.shadow().digest().count},
          {"table_capacity", ch.table_capacity()},
          {"table_digest", ch.shadow().digest().value},
          {"queued_change_sets", ch.queued_change_sets()},
          {"txn_in_flight", ch.txn_in_flight()},
          {"last_error", ch.last_error()},
          {"stats", {{"hellos", s.hellos}, {"replays", s.replays}, {"reconcile_skips", s.reconcile_skips},
                     {"txns_committed", s.txns_committed}, {"txns_aborted", s.txns_aborted},
                     {"table_full", s.table_full}, {"degraded", s.degraded}, {"resets", s.resets},
                     {"errors", s.errors}, {"stale_events", s.stale_events},
                     {"vnic_ops_withheld", s.vnic_ops_withheld}, {"transport_resets", s.transport_resets},
                     {"refusals_split", s.refusals_split}, {"split_txns", s.split_txns},
                     {"change_sets_refused", s.change_sets_refused}}},
          {"channel", {{"violations", l.violations}, {"last_violation", l.last_violation},
                       {"files_replaced", l.files_replaced}, {"mapped", l.file != nullptr}}},
          {"punts", {{"received", l.punts.received}, {"resolved", l.punts.resolved},
                     {"refused", l.punts.refused}, {"denied", l.punts.denied},
                     {"duplicate", l.punts.duplicate}, {"slot_lost", l.punts.slot_lost}, {"revoked", l.punts.revoked},
                     {"over_quota", l.punts.over_quota}, {"foreign", l.punts.foreign},
                     {"install_refused", l.punts.install_refused}, {"waiting", l.fair.size()},
                     {"tenants", tenant_punts_json(l)}}},
          {"bar", jbar}};
}

std::map<std::string, LinkSnapshot> AgentCore::snapshot() const {
  std::map<std::string, LinkSnapshot> s;
  for (const auto& [name, l] : links_)
    s[name] = LinkSnapshot{channel_state_name(l->ch->state()), rnic_state_of(*l), l->ch->version(),
                           l->ch->shadow().version(), l->ch->shadow().digest().count,
                           l->ch->stats().txns_committed, l->punts.received, l->fair.stats()};
  return s;
}

// This server's status for etcd: only what changes when something happens
// (the caller writes it when it differs), so an idle fleet writes nothing.
json AgentCore::fleet_status(const json& extra) const {
  if (!fleet_) return nullptr;
  json rn = json::object();
  std::string health = "ok";  // or what is not: an RNIC channel not ACTIVE, refused changes
  for (const auto& [name, l] : links_) {
    if (l->ch->state() != ChannelState::kActive && health == "ok")
      health = "degraded: RNIC " + name + " is " + channel_state_name(l->ch->state());
    rn[name] = {{"state", channel_state_name(l->ch->state())},
                {"rnic_state", rnic_state_of(*l)},
                {"protocol_version", l->ch->version()},
                {"table_version", l->ch->shadow().version()},
                {"table_entries", l->ch->shadow().digest().count},
                {"queued_change_sets", l->ch->queued_change_sets()}};
  }
  const fleet::FleetApplyStats& st = fleet_->stats();
  if (health == "ok" && st.changes_rejected) health = "degraded: changes refused (see last_error)";
  json j = {{"server", fleet_->server()}, {"health", health},
            {"protocol_version", common::kProtocolVersionCurrent}, {"applied_revision", fleet_->revision()},
            {"changes_applied", st.changes_applied}, {"changes_rejected", st.changes_rejected},
            {"unsupported", st.unsupported}, {"resync_changes", st.resync_changes}, {"full_reads", st.snapshots},
            {"malformed", fleet_->desired().malformed()}, {"last_error", st.last_error},
            {"stale_withdrawn", fleet_stale_withdrawn_},
            {"level1", {{"tenants", state_.tenants().size()}, {"vnics", state_.vnics().size()},
                        {"mappings", state_.mappings().size()}}},
            {"rnics", rn}};
  for (const auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

}  // namespace tandem::dpu
