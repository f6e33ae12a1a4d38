#include "rnic/port/commit_fanout.h"

#include <algorithm>

namespace tandem::rnic::port {

bool committed_table_of(const common::RawMessage& m, common::CommittedTable& out) noexcept {
  if (m.type() == common::MessageType::kCommitted) {
    const auto c = common::as<common::CommittedMsg>(m);
    out = common::CommittedTable{c.version, c.digest, c.entry_count};
    return true;
  }
  if (m.type() == common::MessageType::kHelloAck) {
    const auto h = common::as<common::HelloAckMsg>(m);
    out = common::CommittedTable{h.committed_version, h.digest, h.entry_count};
    return true;
  }
  return false;
}

bool commit_event_ready(const common::RawMessage& m, uint64_t visible) noexcept {
  common::CommittedTable t;
  return !committed_table_of(m, t) || t.version <= visible;
}

CommitFanout::CommitFanout(const Level2Table& table, uint32_t lcores)
    : table_(table),
      n_(std::max<uint32_t>(lcores, 1)),
      slots_(std::make_unique<Slot[]>(n_)),
      packets_(std::make_unique<Packets[]>(n_)) {
  for (uint32_t k = 0; k < n_; ++k)
    punts_.push_back(k == 0 ? nullptr : std::make_unique<host::SpscQueue<common::EntryKey, kPuntRing>>());
  pub_.snap = table.begin_read();
  pub_.seq = 1;
  pub_epoch_.store(pub_.snap.epoch);
  seq_.store(1);
}

bool CommitFanout::publish(const RnicChannel* ch) {
  active_.store(ch != nullptr && ch->state() == RnicChannelState::kActive, std::memory_order_relaxed);
  // The writer's own fields: plain reads on its thread.
  const uint64_t version = table_.version(), epoch = table_.epoch();
  const bool channel = ch != nullptr;
  const bool from_agent = ch && ch->vnics_from_agent();
  const uint16_t negotiated = ch ? ch->negotiated_version() : 0;
  const uint64_t generation = ch ? ch->vnics().generation() : 0;
  if (version == pub_.snap.version && epoch == pub_.snap.epoch && channel == pub_.channel &&
      from_agent == pub_.vnics_from_agent && negotiated == pub_.negotiated_version &&
      generation == pub_.vnics_generation) [[likely]]
    return false;
  // Never waits: an lcore copying the last view (and preempted meanwhile) must
  // not stop the channel's lcore; it publishes on its next iteration instead.
  std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
  if (!g.owns_lock()) return false;
  pub_.snap = Level2Table::Snapshot{epoch, version};
  pub_.channel = channel;
  pub_.vnics_from_agent = from_agent;
  pub_.negotiated_version = negotiated;
  if (generation != pub_.vnics_generation || !ch) pub_.vnics = ch ? ch->vnics().committed() : std::vector<common::VnicAction>{};
  pub_.vnics_generation = generation;
  ++pub_.seq;
  pub_epoch_.store(epoch, std::memory_order_seq_cst);
  seq_.store(pub_.seq, std::memory_order_release);
  return true;
}

bool CommitFanout::adopt(uint32_t k, LcoreView& v) {
  if (seq_.load(std::memory_order_acquire) == v.seq) [[likely]]
    return false;
  std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
  if (!g.owns_lock()) return false;  // lcore 0 is publishing: the next iteration adopts
  const bool new_vnics = v.seq == 0 || v.vnics_generation != pub_.vnics_generation || v.channel != pub_.channel;
  v.snap = pub_.snap;
  v.channel = pub_.channel;
  v.vnics_from_agent = pub_.vnics_from_agent;
  v.negotiated_version = pub_.negotiated_version;
  v.vnics_generation = pub_.vnics_generation;
  if (new_vnics) v.vnics = pub_.vnics;
  v.seq = pub_.seq;
  // Under mu_: the writer publishes no newer epoch (and so reclaims no further
  // than pub_epoch_) until this lcore's epoch is in its slot.
  slots_[k].epoch.store(v.snap.epoch, std::memory_order_seq_cst);
  return true;
}

uint64_t CommitFanout::min_active(const Level2Table&) const noexcept {
  uint64_t m = pub_epoch_.load(std::memory_order_seq_cst);
  for (uint32_t k = 0; k < n_; ++k) m = std::min(m, slots_[k].epoch.load(std::memory_order_seq_cst));
  return m;
}

uint64_t CommitFanout::visible_version() const noexcept {
  uint64_t v = ~uint64_t{0};
  for (uint32_t k = 0; k < n_; ++k) v = std::min(v, slots_[k].version.load(std::memory_order_acquire));
  return v;
}

uint64_t CommitFanout::rx_packets() const noexcept {
  uint64_t s = 0;
  for (uint32_t k = 0; k < n_; ++k) s += packets_[k].rx.load(std::memory_order_relaxed);
  return s;
}

uint64_t CommitFanout::tx_packets() const noexcept {
  uint64_t s = 0;
  for (uint32_t k = 0; k < n_; ++k) s += packets_[k].tx.load(std::memory_order_relaxed);
  return s;
}

void LcoreAgent::punt(const common::EntryKey& key, uint64_t now) noexcept {
  if (direct_ != nullptr) {
    direct_->punt(key, now);
    return;
  }
  // A route that stays missing misses on every packet: hand each key once per
  // kRehandNs and version, not once per packet (lcore 0 limits it again).
  const uint64_t h = (uint64_t{key.word0} << 32 | key.word1) * 0x9E3779B97F4A7C15ull ^ static_cast<uint8_t>(key.kind);
  Recent& r = recent_[(h >> 60) % kRecent];
  if (r.key == key && r.version == view_.snap.version && now - r.at < kRehandNs) {
    ++k_counters_.punts_repeated;
    return;
  }
  if (!fanout_.hand_punt(k_, key)) {
    ++k_counters_.punts_ring_full;
    return;
  }
  r = Recent{key, now, view_.snap.version};
  ++k_counters_.punts_handed;
}

}  // namespace tandem::rnic::port
