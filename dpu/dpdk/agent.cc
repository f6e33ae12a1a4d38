#include "dpu/dpdk/agent.h"

#include <rte_pause.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>
#include <grp.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <array>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <nlohmann/json.hpp>

#include "common/channel/channel_region.h"
#include "common/dpdk/eal.h"
#include "common/dpdk/process_trace.h"
#include "common/dpdk/stop_signal.h"
#include "common/dpdk/telemetry.h"
#include "common/dpdk/tsc_clock.h"
#include "dpu/api/control_api.h"
#include "dpu/channel/agent_channel.h"
#include "dpu/dpdk/channel_file.h"
#include "dpu/dpdk/control_socket.h"
#include "dpu/store/store.h"
#include "dpu/txn/derive.h"
#include "dpu/txn/fair_punts.h"
#include "dpu/txn/pending_punts.h"
#ifdef TANDEM_FLEET
#include "dpu/fleet/fleet_watcher.h"
#endif

namespace tandem::dpu::dpdk {

namespace cd = common::dpdk;
using nlohmann::json;

std::string channel_path(const std::string& dir, const std::string& rnic) { return dir + "/tandem-" + rnic + ".chan"; }

#ifdef TANDEM_FLEET
bool fleet_built() noexcept { return true; }
#else
bool fleet_built() noexcept { return false; }
#endif

namespace {

constexpr unsigned kBurst = 64;

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

struct PuntStats {
  uint64_t received = 0;
  uint64_t resolved = 0;     // change set submitted
  uint64_t refused = 0;      // no mapping / denied by isolation / unknown vNIC
  uint64_t denied = 0;       // of refused: isolation
  uint64_t duplicate = 0;    // already being installed
  uint64_t slot_lost = 0;    // slot overwritten before it was read
  uint64_t revoked = 0;      // resolutions undone after commit: level 1 changed meanwhile
  uint64_t over_quota = 0;   // of refused: the tenant's flow quota on the target RNIC was used up
};

// One managed RNIC: its file, rings and protocol state machine.
struct Link {
  std::string name;
  std::unique_ptr<ChannelFile> file;
  std::unique_ptr<AgentChannel> ch;
  std::deque<common::RawMessage> unsent;  // commands the ring had no room for yet
  PendingPunts pending;                   // resolutions submitted to this RNIC, by tag and missed key
  PuntStats punts;
  uint64_t save_errors = 0;
  uint64_t vnic_session = 0;              // channel session whose vNIC entries were reconciled
  FairPunts fair;                         // punts waiting, per tenant
  std::unordered_map<uint32_t, uint32_t> inflight;  // tenant -> resolutions submitted, not answered
  uint32_t port_id = 0;
  // A worker that scribbled on its channel (common/channel/channel_view.h):
  // the file is retired, and a fresh one made after a back-off that doubles
  // while it keeps doing so; file is null meanwhile.
  uint64_t violations = 0;
  std::string last_violation;
  uint64_t last_violation_ns = 0;
  uint64_t backoff_ns = 0;
  uint64_t reopen_at = 0;
  uint64_t files_replaced = 0;
};

class Agent final : public AgentHooks {
 public:
  explicit Agent(const AgentConfig& c) : c_(c), store_(c.db), api_(state_, store_, this) {
    store_.load(state_);
    instance_ = static_cast<uint32_t>(rte_rdtsc() ^ (uint64_t{static_cast<uint32_t>(getpid())} << 16)) | 1u;
    ch_cfg_.agent_instance = instance_;
    ch_cfg_.heartbeat_timeout_ns = c.heartbeat_timeout_ms * 1'000'000ull;
    ch_cfg_.pipeline = true;  // next txn sent while the previous one commits
    if (c.max_protocol != 0) ch_cfg_.versions.current = c.max_protocol;  // checked by run()
    for (const auto& [name, r] : state_.rnics()) open_link(name);
    for (const std::string& n : c.rnics) open_link(n);
    gid_t gid = static_cast<gid_t>(-1);
    if (!c.control_group.empty()) {
      const struct group* g = ::getgrnam(c.control_group.c_str());
      if (!g) throw std::runtime_error("--control-group: no group named " + c.control_group);
      gid = g->gr_gid;
    }
    socket_ = std::make_unique<ControlSocket>(c.control_socket, api_, gid);
    start_fleet();
    // Trace units (common/trace): the set-up stages this process handles
    // (agent_resolve, txn_commit), rules from tandemctl over the control
    // socket (trace()) or telemetry, as the workers take theirs.
    trace_ = cd::open_process_trace("tandem-dpu", clock_);
    cd::register_trace_telemetry("/tandem/dpu/trace", trace_);
    cd::telemetry_register("/tandem/dpu/rnics", "tandem-dpu managed RNICs: channel state, versions, BAR counters",
                           [this](std::string_view, cd::TelemetryDict& d) {
                             std::lock_guard<std::mutex> g(snap_mu_);
                             for (const auto& [name, s] : snap_)
                               d.dict(name.c_str(), [&](cd::TelemetryDict& x) {
                                 x.str("state", s.state);
                                 x.str("rnic_state", s.rnic_state);
                                 x.u64("protocol_version", s.version);
                                 x.u64("table_version", s.table_version);
                                 x.u64("entries", s.entries);
                                 x.u64("txns_committed", s.committed);
                                 x.u64("punts", s.punts);
                                 // Flat keys: a telemetry dict nests one level only.
                                 for (const auto& [vni, t] : s.tenants) {
                                   const std::string p = "tenant_" + std::to_string(vni) + "_punts_";
                                   x.u64((p + "queued").c_str(), t.queued);
                                   x.u64((p + "served").c_str(), t.served);
                                   x.u64((p + "dropped").c_str(), t.dropped);
                                   x.u64((p + "over_quota").c_str(), t.over_quota);
                                 }
                               });
                             return 0;
                           });
  }

  int loop() {
    cd::IdleLoop idle(c_.idle);
    uint64_t end = c_.duration_s > 0 ? static_cast<uint64_t>(c_.duration_s * 1e9) : 0;
    uint64_t last_snap = 0;
    uint64_t last_sock = 0;
    while (!cd::stop_requested()) {
      uint64_t now = clock_.now_ns();
      if (end && now >= end) break;
      trace_->tracer.poll(now);
      bool did = false;
      for (auto& [name, l] : links_) did |= service(*l, now);
      if (did || now - last_sock >= 200'000) {  // control socket and etcd's batches: every 200 us while idle
        did |= socket_->poll();
        did |= fleet_poll();
        last_sock = now;
      }
      if (now - last_snap >= 100'000'000) {
        publish_snapshot();
        last_snap = now;
      }
      idle.after_iteration(did);
    }
    return 0;
  }

  // AgentHooks
  void changed(const Change& c, const std::optional<Vnic>& removed) override {
    if (auto* r = std::get_if<AddRnic>(&c)) {
      open_link(r->name);
    } else if (std::holds_alternative<AddVnic>(c)) {
      // The vNIC's RNIC learns it from its table (v3; withheld from an older
      // one); a vNIC on an RNIC below v4 also takes its tenant's key away.
      sync_vnic_entries();
    } else if (auto* m = std::get_if<AddMapping>(&c)) {
      if (m->replace)
        mappings_replaced({MappingKey{m->vni, m->overlay_ip}});  // new entries in place, no window without
      else
        withdraw_mapping(MappingKey{m->vni, m->overlay_ip});
    } else if (auto* m = std::get_if<RemoveMapping>(&c)) {
      withdraw_mapping(MappingKey{m->vni, m->overlay_ip});
    } else if (std::holds_alternative<RemoveVnic>(c) && removed) {
      for (auto& [n, l] : links_) {
        ChangeSet cs = deletions_for_vnic(l->ch->shadow(), removed->id, removed->vni, removed->overlay_ip);
        if (!cs.ops.empty()) {
          cs.tag = next_tag_++;
          l->ch->submit(std::move(cs));
        }
      }
      sync_vnic_entries();  // its tenant may now be keyed everywhere
    }
  }

  void mappings_replaced(const std::vector<MappingKey>& keys) override {
    for (auto& [n, l] : links_) {
      ChangeSet cs = changes_for_replaced_mappings(state_, l->ch->shadow(), n, keys);
      if (!cs.ops.empty()) {
        cs.tag = next_tag_++;
        l->ch->submit(std::move(cs));
      }
    }
  }

  json rnics() const override {
    json a = json::array();
    for (const auto& [name, l] : links_) a.push_back(link_json(*l));
    return a;
  }

  json trace(const std::string& rule) override {
    std::lock_guard<std::mutex> g(trace_->mu);
    if (!trace_->ring) return nullptr;
    if (!rule.empty()) cd::trace_request(*trace_, rule);
    return {{"requested", trace_->last_rule}, {"ring", trace_->path}, {"ring_bytes", trace_->ring->bytes()},
            {"capacity", trace_->ring->header()->capacity}, {"running", trace_->tracer.running()},
            {"written", trace_->tracer.written()}, {"pid", getpid()}};
  }

  json level2(const std::string& rnic) const override {
    auto it = links_.find(rnic);
    if (it == links_.end()) return nullptr;
    const Level2Shadow& s = it->second->ch->shadow();
    json e = json::array();
    for (const common::Level2Entry& x : s.snapshot()) e.push_back(level2_entry_json(x));
    return {{"version", s.version()}, {"digest", s.digest().value}, {"count", s.digest().count}, {"entries", e}};
  }

 private:
  struct Snap {
    std::string state, rnic_state;
    uint64_t version = 0, table_version = 0, entries = 0, committed = 0, punts = 0;
    std::map<uint32_t, TenantPuntStats> tenants;  // fair shares: punts per tenant
  };

  // A tenant's partition key is stamped and checked only once every RNIC with
  // one of its vNICs speaks v4 (an older one sends 0xFFFF, which a keyed peer
  // would drop); an RNIC not seen yet counts as current. docs/partitions.md.
  bool tenant_keyed(uint32_t vni) const {
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
  void sync_vnic_entries() {
    for (auto& [n, l] : links_) {
      if (l->ch->version() == 0) continue;
      const bool v4 = common::has_partition_keys(l->ch->version());
      ChangeSet cs = changes_for_vnics(state_, l->ch->shadow(), n,
                                       [&](const Vnic& v) { return v4 && tenant_keyed(v.vni); });
      if (!cs.ops.empty()) {
        cs.tag = next_tag_++;
        l->ch->submit(std::move(cs));
      }
    }
  }

  void open_link(const std::string& name) {
    if (links_.count(name)) return;
    auto l = std::make_unique<Link>();
    l->name = name;
    l->port_id = static_cast<uint32_t>(links_.size());
    l->file = std::make_unique<ChannelFile>(channel_path(c_.channel_dir, name), name, l->port_id);
    Level2Snapshot snap = store_.load_level2(name);
    Level2Shadow shadow;
    shadow.reset(snap.version, snap.entries);
    l->ch = std::make_unique<AgentChannel>(name, ch_cfg_, std::move(shadow));
    l->ch->start(clock_.now_ns());
    std::fprintf(stderr, "tandem-dpu: RNIC %s: channel %s (%s), level-2 shadow v%llu with %zu entries\n",
                 name.c_str(), l->file->path().c_str(), l->file->reused() ? "re-opened" : "created",
                 static_cast<unsigned long long>(snap.version), snap.entries.size());
    links_.emplace(name, std::move(l));
  }

  void withdraw_mapping(const MappingKey& k) {
    for (auto& [n, l] : links_) {
      ChangeSet cs = deletions_for_mapping(l->ch->shadow(), k);
      if (!cs.ops.empty()) {
        cs.tag = next_tag_++;
        l->ch->submit(std::move(cs));
      }
    }
  }

  // The worker broke its channel: count it, retire the file (a worker still
  // mapping it learns a new one is coming), forget the rings, and make a new
  // file after the back-off.
  void violation(Link& l, const char* why, uint64_t now) {
    ++l.violations;
    l.last_violation = why;
    constexpr uint64_t kFirst = 100'000'000, kMax = 10'000'000'000ull, kForgive = 60'000'000'000ull;
    l.backoff_ns = l.backoff_ns == 0 || now - l.last_violation_ns > kForgive ? kFirst : std::min(kMax, 2 * l.backoff_ns);
    l.last_violation_ns = now;
    l.reopen_at = now + l.backoff_ns;
    if (l.violations <= 5 || (l.violations & (l.violations - 1)) == 0)
      std::fprintf(stderr, "tandem-dpu: RNIC %s: channel violation %llu (%s): link reset, new channel file in %.1f s\n",
                   l.name.c_str(), static_cast<unsigned long long>(l.violations), why, l.backoff_ns / 1e9);
    l.file->view().retire();
    l.file.reset();
    l.unsent.clear();
    l.ch->transport_reset(now, std::string("channel violation: ") + why);
  }

  void reopen(Link& l, uint64_t now) {
    try {
      l.file = std::make_unique<ChannelFile>(channel_path(c_.channel_dir, l.name), l.name, l.port_id,
                                             ChannelFile::Open::kFresh);
      ++l.files_replaced;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tandem-dpu: RNIC %s: %s\n", l.name.c_str(), e.what());
      l.reopen_at = now + 1'000'000'000;
    }
  }

  bool service(Link& l, uint64_t now) {
    if (!l.file) {
      if (now < l.reopen_at) return false;
      reopen(l, now);
      if (!l.file) return false;
    }
    common::ChannelView& view = l.file->view();
    bool did = false;
    common::RawMessage* ev = ev_buf_.data();
    unsigned n = view.events().dequeue(ev, kBurst);
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
      unsigned sent = view.commands().enqueue(out, k);
      for (unsigned i = 0; i < sent; ++i) l.unsent.pop_front();
      did |= sent > 0;
      if (sent < k) break;
    }
    for (TxnOutcome& o : l.ch->take_outcomes()) {
      did = true;
      if (trace_->tracer.active()) [[unlikely]] trace_commit(l, o, now);
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
          std::fprintf(stderr, "tandem-dpu: RNIC %s: saving level-2 v%llu failed: %s\n", l.name.c_str(),
                       static_cast<unsigned long long>(o.version), e.what());
        }
      }
      for (uint64_t tag : o.tags) {
        const PendingPunts::Entry* pp = l.pending.find(tag);
        if (!pp) continue;
        if (o.committed) revalidate(l, *pp);
        if (auto it = l.inflight.find(tenant_of(pp->missed)); it != l.inflight.end() && it->second) --it->second;
        l.pending.erase(tag);
      }
    }
    std::vector<common::PuntMsg> punts = l.ch->take_punts();
    warm_for_punts(state_, &l.ch->shadow(), punts);
    for (const common::PuntMsg& p : punts) l.fair.push(tenant_of(p.missed), p);
    did |= !punts.empty();
    did |= l.fair.serve(c_.punts_per_round, [&](uint32_t vni, const common::PuntMsg& p) { resolve_punt(l, vni, p); }) > 0;
    if (l.file)
      if (const char* why = l.file->view().check()) [[unlikely]] violation(l, why, now);
    return did;
  }

  // The tenant a missed key is charged to: its local vNIC's (egress keys), 0 if none.
  uint32_t tenant_of(const common::EntryKey& k) const {
    if (k.kind != common::EntryKind::kEgress) return 0;
    const Vnic* v = state_.vnic(k.word0);
    return v ? v->vni : 0;
  }

  // Whether tenant vni may install one more flow on `to` (its fair share).
  bool within_quota(Link& to, uint32_t vni) {
    const Tenant* t = state_.tenant(vni);
    uint64_t quota = t && t->flow_quota ? t->flow_quota : c_.tenant_flow_quota;
    if (quota == 0) quota = std::max<uint32_t>(1, to.ch->table_capacity() / 4);
    return to.inflight[vni] + flows_on(to, vni) < quota;
  }

  // Tenant vni's flows (egress entries) that `l`'s RNIC has committed.
  uint64_t flows_on(const Link& l, uint32_t vni) const {
    uint64_t n = 0;
    for (uint32_t id : state_.vnics_of(vni)) {
      const Vnic* v = state_.vnic(id);
      if (v && v->rnic == l.name) n += l.ch->shadow().egress_of_vnic(id);
    }
    return n;
  }

  // A resolution committed: undo it if level 1 changed meanwhile (derive.h).
  void revalidate(Link& l, const PendingPunts::Entry& pp) {
    if (!needs_revalidation(state_, pp.level1_generation)) return;  // level 1 unchanged since it was resolved
    revalidate_puts_.assign(pp.installs().begin(), pp.installs().end());  // reused: no allocation per flow
    ChangeSet undo = revalidate_resolution(state_, l.ch->shadow(), l.name, pp.missed, revalidate_puts_);
    if (undo.ops.empty()) return;
    ++l.punts.revoked;
    undo.tag = next_tag_++;
    l.ch->submit(std::move(undo));
  }

  void resolve_punt(Link& l, uint32_t vni, const common::PuntMsg& p) {
    using common::trace::SetupVerdict;
    ++l.punts.received;
    // Where the punt ended, for a trace rule (agent_resolve records).
    const common::Level2Entry* resolved = nullptr;
    SetupVerdict verdict = SetupVerdict::kRefused;
    struct Traced {
      Agent& a;
      const Link& l;
      const common::EntryKey& missed;
      const common::Level2Entry*& resolved;
      SetupVerdict& verdict;
      ~Traced() {
        if (a.trace_->tracer.active()) [[unlikely]] a.trace_resolve(l, missed, resolved, verdict);
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
        violation(l, "punt names a slot beyond the slot area", clock_.now_ns());
        return;
      }
    }
    if (l.pending.contains(p.missed)) {
      ++l.punts.duplicate;
      verdict = SetupVerdict::kDuplicate;
      return;
    }
    ResolveStatus why = ResolveStatus::kOk;
    uint64_t tag = next_tag_++;
    std::optional<ChangeSet> cs =
        change_set_for_miss(state_, p.missed, tag, &target_, &why, &l.ch->shadow(), &l.pending);
    if (!cs) {
      ++l.punts.refused;
      if (why == ResolveStatus::kDeniedByIsolation) {
        ++l.punts.denied;
        verdict = SetupVerdict::kDenied;
      }
      return;
    }
    // Nearly always the punting RNIC itself: no map lookup by name then.
    Link* to = target_ == l.name ? &l : nullptr;
    if (!to) {
      auto it = links_.find(target_);
      if (it != links_.end()) to = it->second.get();
      // The ingress key was checked against the punting RNIC's tables: check
      // it against the target's.
      if (to) cs = change_set_for_miss(state_, p.missed, tag, &target_, &why, &to->ch->shadow(), &to->pending);
    }
    if (!to || !cs) {
      ++l.punts.refused;
      if (!to) verdict = SetupVerdict::kNoTarget;
      return;
    }
    if (vni != 0 && !within_quota(*to, vni)) {
      ++l.punts.refused;
      ++l.punts.over_quota;
      verdict = SetupVerdict::kOverQuota;
      l.fair.note_over_quota(vni);
      return;
    }
    ++l.punts.resolved;
    ++to->inflight[vni];
    to->pending.add(p.missed, *cs, state_.generation());
    if (trace_->tracer.active()) [[unlikely]] {
      verdict = SetupVerdict::kOk;
      resolved_entry_ = egress_put(*cs, p.missed);
      resolved = resolved_entry_ ? &*resolved_entry_ : nullptr;
    }
    to->ch->submit(std::move(*cs));
  }

  // ---- trace units (set-up records; common/trace/trace_record.h)
  // The egress entry a change set puts for `key` (what a resolution installs).
  static std::optional<common::Level2Entry> egress_put(const ChangeSet& cs, const common::EntryKey& key) {
    for (const auto& op : cs.ops)
      if (!op.del && op.entry.key == key) return op.entry;
    return std::nullopt;
  }
  // The BTH P_Key of the tenant whose vNIC `vnic_id` is (what a rule's pkey names).
  uint16_t wire_pkey_of_vnic(uint32_t vnic_id) const {
    const Vnic* v = state_.vnic(vnic_id);
    const Tenant* t = v ? state_.tenant(v->vni) : nullptr;
    return common::wire_pkey(t ? t->entry_pkey() : 0);
  }
  uint32_t underlay_of(const std::string& rnic) const {
    const Rnic* r = state_.rnic(rnic);
    return r ? r->underlay_ip : 0;
  }
  void trace_setup(common::trace::Stage stage, uint32_t src, uint32_t dst, const common::EntryKey& key,
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
    trace_->tracer.record(r);
  }
  // A punt from `l`'s RNIC ended (resolved: the egress entry it installs).
  void trace_resolve(const Link& l, const common::EntryKey& missed, const common::Level2Entry* resolved,
                     common::trace::SetupVerdict verdict) {
    if (missed.kind != common::EntryKind::kEgress) return;  // the only kind workers punt
    const common::trace::Rule& rule = trace_->tracer.rule();
    const uint16_t pkey = wire_pkey_of_vnic(missed.word0);
    const uint32_t src = resolved ? resolved->egress.underlay_src_ip : underlay_of(l.name);
    const uint32_t dst = resolved ? resolved->egress.underlay_dst_ip : 0;
    if (dst ? !rule.matches_pair(src, dst, pkey) : !rule.matches_end(src, pkey)) return;
    trace_setup(common::trace::Stage::kAgentResolve, src, dst, missed, verdict, 0, clock_.now_ns());
  }
  // A transaction on `l`'s RNIC ended: one record per egress entry it put
  // that the rule covers (committed: its net puts; aborted: the resolutions
  // it carried), with the committed table version.
  void trace_commit(const Link& l, const TxnOutcome& o, uint64_t now) {
    if (o.replay) return;  // the whole shadow again, nothing new
    const common::trace::Rule& rule = trace_->tracer.rule();
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

  // Per tenant: punts taken, served, dropped (queue full), refused over quota,
  // and the tenant's flows on this RNIC.
  json tenant_punts_json(const Link& l) const {
    json t = json::object();
    for (const auto& [vni, st] : l.fair.stats())
      t[std::to_string(vni)] = {{"queued", st.queued}, {"served", st.served}, {"dropped", st.dropped},
                                {"over_quota", st.over_quota}, {"flows", flows_on(l, vni)}};
    return t;
  }

  json link_json(const Link& l) const {
    const AgentChannel& ch = *l.ch;
    json jbar = {{"state", "none"}};  // no file: replaced after a violation, the new one not made yet
    if (l.file) jbar = bar_json(l.file->view());
    const AgentChannelStats& s = ch.stats();
    return {{"name", l.name},
            {"file", channel_path(c_.channel_dir, l.name)},
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
                       {"vnic_ops_withheld", s.vnic_ops_withheld}, {"transport_resets", s.transport_resets}}},
            {"channel", {{"violations", l.violations}, {"last_violation", l.last_violation},
                         {"files_replaced", l.files_replaced}, {"mapped", l.file != nullptr}}},
            {"punts", {{"received", l.punts.received}, {"resolved", l.punts.resolved},
                       {"refused", l.punts.refused}, {"denied", l.punts.denied},
                       {"duplicate", l.punts.duplicate}, {"slot_lost", l.punts.slot_lost}, {"revoked", l.punts.revoked},
                       {"over_quota", l.punts.over_quota}, {"waiting", l.fair.size()}, {"tenants", tenant_punts_json(l)}}},
            {"bar", jbar}};
  }

  // What the worker's BAR says (values only: nothing in it is used as an address or size).
  static json bar_json(const common::ChannelView& v) {
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
    for (int i = 0; i < 10000 && !(t = common::bar_read_table(bar)); ++i) rte_pause();  // writer mid-update
    if (t)
      jbar["table"] = {{"version", t->version}, {"digest", t->digest}, {"entries", t->entry_count}};
    return jbar;
  }

  // Fleet mode: the stored revision says where to resume the watch.
  void start_fleet() {
    if (c_.fleet.endpoints.empty()) return;
#ifdef TANDEM_FLEET
    if (c_.fleet.server.empty()) throw std::runtime_error("--etcd needs --server NAME");
    FleetRevision stored = store_.fleet_revision();
    int64_t resume = stored.revision;
    if (resume != 0 && stored.server != c_.fleet.server) {
      std::fprintf(stderr, "tandem-dpu: fleet: the store was synced as server %s, not %s: reading etcd whole\n",
                   stored.server.c_str(), c_.fleet.server.c_str());
      resume = 0;
    }
    fleet_ = std::make_unique<fleet::FleetApplier>(c_.fleet.server, resume);
    fleet::FleetConfig fc;
    fc.etcd = fleet::EtcdOptions{c_.fleet.endpoints, c_.fleet.cacert, c_.fleet.cert, c_.fleet.key,
                                 c_.fleet.user, c_.fleet.password, 3000};
    fc.server = c_.fleet.server;
    fc.lease_ttl_s = c_.fleet.lease_ttl_s;
    fleet_watcher_ = std::make_unique<fleet::FleetWatcher>(fc, resume);
    std::fprintf(stderr, "tandem-dpu: fleet: server %s, etcd %s, resuming after revision %lld\n",
                 c_.fleet.server.c_str(), c_.fleet.endpoints.c_str(), static_cast<long long>(resume));
#else
    throw std::runtime_error("--etcd: this tandem-dpu was built without fleet mode (run scripts/setup.sh, rebuild)");
#endif
  }

  // Applies what etcd sent, in revision order, like tandemctl changes (held
  // back while a mapping import runs). A bounded amount per iteration.
  bool fleet_poll() {
#ifdef TANDEM_FLEET
    if (!fleet_) return false;
    fleet_watcher_->take(fleet_queue_);
    if (fleet_queue_.empty() || api_.busy()) return false;
    fleet::FleetBatch b = fleet::next_batch(fleet_queue_, kFleetEventsPerStep);
    std::vector<fleet::Applied> applied;
    const uint64_t t0 = clock_.now_ns(), cpu0 = thread_cpu_ns();
    try {
      applied = fleet_->apply(b, state_, store_);
    } catch (const StoreError& e) {
      // Level 1 is ahead of disk now: stop; a restart reloads and resumes from disk.
      throw std::runtime_error(std::string("fleet: cannot persist revision ") + std::to_string(b.revision) + ": " + e.what());
    }
    // As tandemctl's changes, but the mapping ones together: one pass over
    // each RNIC's shadow for the whole batch, not one per mapping.
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
      for (auto& [n, l] : links_) {
        ChangeSet cs = deletions_for_mappings(l->ch->shadow(), withdrawn);
        if (!cs.ops.empty()) {
          cs.tag = next_tag_++;
          l->ch->submit(std::move(cs));
        }
      }
    if (!replaced.empty()) mappings_replaced(replaced);
    if (b.snapshot) {
      // A full read (start, or after a compaction): level 1 may have changed
      // while an RNIC did not hear of it (killed between the SQLite commit and
      // the change set): withdraw what level 1 no longer gives.
      for (auto& [n, l] : links_) {
        ChangeSet cs = stale_entries(state_, l->ch->shadow());
        fleet_stale_withdrawn_ += cs.ops.size();
        if (!cs.ops.empty()) {
          cs.tag = next_tag_++;
          l->ch->submit(std::move(cs));
        }
      }
    }
    fleet_step_max_ns_ = std::max(fleet_step_max_ns_, clock_.now_ns() - t0);
    fleet_step_cpu_max_ns_ = std::max(fleet_step_cpu_max_ns_, thread_cpu_ns() - cpu0);
    const fleet::FleetApplyStats& st = fleet_->stats();
    if (st.changes_rejected != fleet_rejected_logged_ || st.unsupported != fleet_unsupported_logged_) {
      std::fprintf(stderr, "tandem-dpu: fleet: revision %lld: %s\n", static_cast<long long>(b.revision),
                   st.last_error.c_str());
      fleet_rejected_logged_ = st.changes_rejected;
      fleet_unsupported_logged_ = st.unsupported;
    }
    return true;
#else
    return false;
#endif
  }

  // This server's status for etcd: only what changes when something happens
  // (written when it differs), so an idle fleet writes nothing but keep-alives.
  void publish_fleet_status() {
#ifdef TANDEM_FLEET
    if (!fleet_watcher_) return;
    json rn = json::object();
    std::string health = "ok";  // or what is not: an RNIC channel not ACTIVE, refused changes
    for (const auto& [name, l] : links_) {
      if (l->ch->state() != ChannelState::kActive && health == "ok")
        health = "degraded: RNIC " + name + " is " + channel_state_name(l->ch->state());
      rn[name] = {{"state", channel_state_name(l->ch->state())},
                  {"rnic_state", l->file ? rnic_state_name(l->file->view().bar().state.value.load()) : "none"},
                  {"protocol_version", l->ch->version()},
                  {"table_version", l->ch->shadow().version()},
                  {"table_entries", l->ch->shadow().digest().count},
                  {"queued_change_sets", l->ch->queued_change_sets()}};
    }
    const fleet::FleetApplyStats& st = fleet_->stats();
    if (health == "ok" && st.changes_rejected) health = "degraded: changes refused (see last_error)";
    fleet_watcher_->publish_status(
        {{"server", c_.fleet.server}, {"health", health}, {"pid", getpid()},
         {"protocol_version", common::kProtocolVersionCurrent}, {"applied_revision", fleet_->revision()},
         {"pending_batches", fleet_queue_.size()}, {"changes_applied", st.changes_applied},
         {"changes_rejected", st.changes_rejected}, {"unsupported", st.unsupported},
         {"resync_changes", st.resync_changes}, {"full_reads", st.snapshots},
         {"malformed", fleet_->desired().malformed()}, {"last_error", st.last_error},
         {"longest_step_ms", fleet_step_max_ns_ / 1000 / 1e3}, {"stale_withdrawn", fleet_stale_withdrawn_},
         {"longest_step_cpu_ms", fleet_step_cpu_max_ns_ / 1000 / 1e3},
         {"level1", {{"tenants", state_.tenants().size()}, {"vnics", state_.vnics().size()},
                     {"mappings", state_.mappings().size()}}},
         {"rnics", rn}});
#endif
  }

  void publish_snapshot() {
    publish_fleet_status();
    std::map<std::string, Snap> s;
    for (const auto& [name, l] : links_) {
      s[name] = Snap{channel_state_name(l->ch->state()),
                     l->file ? rnic_state_name(l->file->view().bar().state.value.load()) : "none",
                     l->ch->version(), l->ch->shadow().version(), l->ch->shadow().digest().count,
                     l->ch->stats().txns_committed, l->punts.received, l->fair.stats()};
    }
    std::lock_guard<std::mutex> g(snap_mu_);
    snap_ = std::move(s);
  }

  AgentConfig c_;
  cd::TscClock clock_;
  Level1State state_;
  Store store_;
  ControlApi api_;
  uint32_t instance_ = 1;
  AgentChannelConfig ch_cfg_;
  std::map<std::string, std::unique_ptr<Link>> links_;
  std::map<std::string, uint16_t> rnic_version_;  // last negotiated channel version per RNIC
  std::unique_ptr<ControlSocket> socket_;
  std::shared_ptr<cd::ProcessTrace> trace_;  // trace units: the loop's tracer and its ring
  std::optional<common::Level2Entry> resolved_entry_;  // resolve_punt's traced resolution
  uint64_t next_tag_ = 1;
  std::string target_;                                // resolve_punt's target RNIC name, reused
  std::vector<common::Level2Entry> revalidate_puts_;  // revalidate's argument, reused
  // Burst buffers of the loop, here rather than on the stack: RawMessage
  // zero-initialises, and 2 x 4 KiB of memset per iteration showed in perf.
  std::array<common::RawMessage, kBurst> ev_buf_, out_buf_;
  std::mutex snap_mu_;
  std::map<std::string, Snap> snap_;
#ifdef TANDEM_FLEET
  // Events joined into one apply step: ~5 ms of plan, level 1 and SQLite on a
  // quiet core (benchmarks/RESULTS.md "fleet": the loop gap under a burst).
  static constexpr std::size_t kFleetEventsPerStep = 1024;
  std::unique_ptr<fleet::FleetApplier> fleet_;
  std::deque<fleet::FleetBatch> fleet_queue_;
  uint64_t fleet_rejected_logged_ = 0, fleet_unsupported_logged_ = 0;
  // Longest apply step (plan, level 1, SQLite, change sets): wall time, and
  // this thread's CPU time in it (the rest is waiting for a core or the disk).
  uint64_t fleet_step_max_ns_ = 0, fleet_step_cpu_max_ns_ = 0;
  uint64_t fleet_stale_withdrawn_ = 0;  // level-2 entries a full read found level 1 no longer gives
  static uint64_t thread_cpu_ns() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
  }
  // Last: stopped (threads joined, lease revoked) before the rest goes.
  std::unique_ptr<fleet::FleetWatcher> fleet_watcher_;
#endif
};

}  // namespace

int run(const AgentConfig& c) {
  if (c.max_protocol != 0 &&
      (c.max_protocol < common::kProtocolVersionOldest || c.max_protocol > common::kProtocolVersionCurrent))
    throw std::runtime_error("--max-protocol must be " + std::to_string(common::kProtocolVersionOldest) + ".." +
                             std::to_string(common::kProtocolVersionCurrent));
  for (const std::string& w : cd::eal_arg_warnings(c.eal_args)) std::fprintf(stderr, "tandem-dpu: warning: %s\n", w.c_str());
  cd::eal_init("tandem-dpu", c.eal_args);
  cd::install_stop_handlers();
  int rc = 0;
  {
    Agent a(c);
    std::fprintf(stderr, "tandem-dpu: serving %s (db %s)\n", c.control_socket.c_str(), c.db.c_str());
    rc = a.loop();
  }
  cd::eal_cleanup();
  return rc;
}

}  // namespace tandem::dpu::dpdk
