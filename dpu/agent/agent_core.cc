// The agent's RNIC links: opening channels, one service step per RNIC, a
// scribbled channel replaced, level-1 changes turned into change sets.
#include "dpu/agent/agent_core.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "common/log/log.h"
#include "dpu/txn/derive.h"

namespace tandem::dpu {

AgentCore::AgentCore(Level1State& state, Store& store, AgentCoreConfig cfg, ChannelOpener& opener,
                     common::trace::Tracer* tracer)
    : state_(state), store_(store), cfg_(std::move(cfg)), opener_(opener), tracer_(tracer) {
  if (!cfg_.fleet_server.empty()) fleet_ = std::make_unique<fleet::FleetApplier>(cfg_.fleet_server, cfg_.fleet_revision);
}

AgentCore::~AgentCore() = default;

void AgentCore::log(const std::string& s, bool warning) const {
  if (cfg_.log)
    cfg_.log(s);
  else if (warning)
    common::log::warn("{}", s);
  else
    common::log::info("{}", s);
}

void AgentCore::open_links(const std::vector<std::string>& extra, uint64_t now) {
  now_ = now;
  for (const auto& [name, r] : state_.rnics()) open_link(name, now);
  for (const std::string& n : extra) open_link(n, now);
}

void AgentCore::open_link(const std::string& name, uint64_t now) {
  if (links_.count(name)) return;
  auto l = std::make_unique<AgentLink>();
  l->name = name;
  l->port_id = static_cast<uint32_t>(links_.size());
  l->file = opener_.open(name, l->port_id, false);
  Level2Snapshot snap = store_.load_level2(name);
  Level2Shadow shadow;
  shadow.reset(snap.version, snap.entries);
  l->ch = std::make_unique<AgentChannel>(name, cfg_.channel, std::move(shadow));
  l->ch->start(now);
  log("RNIC " + name + ": channel " + l->file->path() + " (" + (l->file->reused() ? "re-opened" : "created") +
      "), level-2 shadow v" + std::to_string(snap.version) + " with " + std::to_string(snap.entries.size()) +
      " entries");
  links_.emplace(name, std::move(l));
}

const AgentLink* AgentCore::link(const std::string& name) const {
  auto it = links_.find(name);
  return it == links_.end() ? nullptr : it->second.get();
}

bool AgentCore::service(uint64_t now) {
  now_ = now;
  bool did = false;
  for (auto& [name, l] : links_) did |= service_link(*l, now);
  return did;
}

// The worker broke its channel: count it, retire the file (a worker still
// mapping it learns a new one is coming), forget the rings, and make a new
// file after the back-off.
void AgentCore::violation(AgentLink& l, const char* why, uint64_t now) {
  ++l.violations;
  l.last_violation = why;
  l.backoff_ns = l.backoff_ns == 0 || now - l.last_violation_ns > kForgiveNs ? kFirstBackoffNs
                                                                            : std::min(kMaxBackoffNs, 2 * l.backoff_ns);
  l.last_violation_ns = now;
  l.reopen_at = now + l.backoff_ns;
  if (l.violations <= 5 || (l.violations & (l.violations - 1)) == 0) {
    char b[64];
    std::snprintf(b, sizeof b, "%.1f", l.backoff_ns / 1e9);
    log("RNIC " + l.name + ": channel violation " + std::to_string(l.violations) + " (" + why +
        "): link reset, new channel file in " + b + " s",
        true);
  }
  l.file->view().retire();
  l.file.reset();
  l.unsent.clear();
  l.ch->transport_reset(now, std::string("channel violation: ") + why);
}

void AgentCore::reopen(AgentLink& l, uint64_t now) {
  try {
    l.file = opener_.open(l.name, l.port_id, true);
    ++l.files_replaced;
  } catch (const std::exception& e) {
    log("RNIC " + l.name + ": " + e.what(), true);
    l.reopen_at = now + 1'000'000'000;
  }
}

bool AgentCore::service_link(AgentLink& l, uint64_t now) {
  if (!l.file) {
    if (now < l.reopen_at) return false;
    reopen(l, now);
    if (!l.file) return false;
  }
  common::ChannelView& view = l.file->view();
  bool did = false;
  common::RawMessage* ev = ev_buf_.data();
  const unsigned n = view.events().dequeue(ev, kBurst);
  for (unsigned i = 0; i < n; ++i) l.ch->on_event(ev[i], now);
  did |= n > 0;
  if (l.ch->session() != l.vnic_session) {
    // A new session (agent start, RNIC restart, re-HELLO): from v3 on, make
    // the RNIC's vNIC entries level 1's (queued behind a replay, if any). Its
    // version may key or unkey tenants on the other RNICs too.
    l.vnic_session = l.ch->session();
    rnic_version_[l.name] = l.ch->version();
    sync_vnic_entries();
  }
  l.ch->on_bar(sample_bar(view.bar()), now);
  l.ch->tick(now);
  common::RawMessage m;
  while (l.ch->pop_command(m)) l.unsent.push_back(m);
  while (!l.unsent.empty()) {
    common::RawMessage* out = out_buf_.data();
    unsigned k = 0;
    for (; k < kBurst && k < l.unsent.size(); ++k) out[k] = l.unsent[k];
    const unsigned sent = view.commands().enqueue(out, k);
    for (unsigned i = 0; i < sent; ++i) l.unsent.pop_front();
    did |= sent > 0;
    if (sent < k) break;
  }
  did |= take_outcomes(l, now);
  std::vector<common::PuntMsg> punts = l.ch->take_punts();
  warm_for_punts(state_, &l.ch->shadow(), punts);
  for (const common::PuntMsg& p : punts) l.fair.push(tenant_of(p.missed), p);
  did |= !punts.empty();
  did |= l.fair.serve(cfg_.punts_per_round, [&](uint32_t vni, const common::PuntMsg& p) { resolve_punt(l, vni, p); }) > 0;
  if (l.file)
    if (const char* why = l.file->view().check()) [[unlikely]] violation(l, why, now);
  return did;
}

void AgentCore::submit(AgentLink& l, ChangeSet cs) {
  if (cs.ops.empty()) return;
  cs.tag = next_tag_++;
  l.ch->submit(std::move(cs));
}

// A tenant's partition key is stamped and checked only once every RNIC with
// one of its vNICs speaks v4 (an older one sends 0xFFFF, which a keyed peer
// would drop); an RNIC not seen yet counts as current. docs/partitions.md.
bool AgentCore::tenant_keyed(uint32_t vni) const {
  for (const auto& [id, v] : state_.vnics()) {
    if (v.vni != vni) continue;
    auto it = rnic_version_.find(v.rnic);
    if (it != rnic_version_.end() && !common::has_partition_keys(it->second)) return false;
  }
  return true;
}

// Makes every connected RNIC's vNIC entries what level 1 and the versions
// say (the channel withholds them from one below v3, and counts it); one
// not connected yet is synced when its session starts.
void AgentCore::sync_vnic_entries() {
  for (auto& [n, l] : links_) {
    if (l->ch->version() == 0) continue;
    const bool v4 = common::has_partition_keys(l->ch->version());
    submit(*l, changes_for_vnics(state_, l->ch->shadow(), n, [&](const Vnic& v) { return v4 && tenant_keyed(v.vni); }));
  }
}

void AgentCore::withdraw_mappings(const std::vector<MappingKey>& keys) {
  if (keys.empty()) return;
  for (auto& [n, l] : links_)
    submit(*l, keys.size() == 1 ? deletions_for_mapping(l->ch->shadow(), keys[0])
                                : deletions_for_mappings(l->ch->shadow(), keys));
}

void AgentCore::changed(const Change& c, const std::optional<Vnic>& removed) {
  if (auto* r = std::get_if<AddRnic>(&c)) {
    open_link(r->name, now_);
  } else if (std::holds_alternative<AddVnic>(c)) {
    // The vNIC's RNIC learns it from its table (v3; withheld from an older
    // one); a vNIC on an RNIC below v4 also takes its tenant's key away.
    sync_vnic_entries();
  } else if (auto* m = std::get_if<AddMapping>(&c)) {
    if (m->replace)
      mappings_replaced({MappingKey{m->vni, m->overlay_ip}});  // new entries in place, no window without
    else
      withdraw_mappings({MappingKey{m->vni, m->overlay_ip}});
  } else if (auto* m = std::get_if<RemoveMapping>(&c)) {
    withdraw_mappings({MappingKey{m->vni, m->overlay_ip}});
  } else if (std::holds_alternative<RemoveVnic>(c) && removed) {
    for (auto& [n, l] : links_)
      submit(*l, deletions_for_vnic(l->ch->shadow(), removed->id, removed->vni, removed->overlay_ip));
    sync_vnic_entries();  // its tenant may now be keyed everywhere
  }
}

void AgentCore::mappings_replaced(const std::vector<MappingKey>& keys) {
  for (auto& [n, l] : links_) submit(*l, changes_for_replaced_mappings(state_, l->ch->shadow(), n, keys));
}

}  // namespace tandem::dpu
