#include "rnic/dpdk/dpu_link.h"

#include <fcntl.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <new>

#include "common/channel/channel_region.h"

namespace tandem::rnic::dpdk {

DpuLink::DpuLink(std::string path, Level2Table& table, uint64_t rnic_instance, uint64_t agent_timeout_ns,
                 uint16_t max_protocol, port::PuntBudgetConfig budget, port::CommitFanout* fanout)
    : path_(std::move(path)), table_(table), budget_(budget), fanout_(fanout) {
  cfg_.readers = fanout;  // nullptr: the table is read between calls on this thread
  cfg_.rnic_instance = rnic_instance;
  cfg_.agent_timeout_ns = agent_timeout_ns;
  if (max_protocol != 0) cfg_.versions.current = max_protocol;
}

DpuLink::~DpuLink() {
  if (base_) munmap(base_, size_);
}

bool DpuLink::try_attach(uint64_t now) noexcept {
  next_try_ = now + kRetryNs;
  int fd = ::open(path_.c_str(), O_RDWR);
  if (fd < 0) {
    attach_error_ = "no channel file yet";
    return false;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(common::ChannelHeader))) {
    ::close(fd);
    attach_error_ = "channel file too small";
    return false;
  }
  size_ = static_cast<std::size_t>(st.st_size);
  void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    attach_error_ = "cannot map channel file";
    return false;
  }
  std::string err = common::check_channel(p, size_);
  if (!err.empty()) {
    munmap(p, size_);
    attach_error_ = err;
    return false;
  }
  base_ = p;
  ino_ = st.st_ino;
  dev_ = st.st_dev;
  cmd_ = static_cast<rte_ring*>(common::channel_cmd_ring(p));
  evt_ = static_cast<rte_ring*>(common::channel_evt_ring(p));
  common::announce_rnic(*static_cast<common::ChannelHeader*>(p), cfg_.versions, static_cast<uint32_t>(getpid()));
  // A re-attach keeps the channel object: its committed table and vNIC list.
  if (!ch_) {
    ch_ = std::make_unique<RnicChannel>(table_, cfg_);
    shown_ = common::CommittedTable{table_.version(), table_.digest().value, table_.digest().count};
  }
  attach_error_.clear();
  if (log_) log_->info(kLogKey, "dpu-link: attached %s", path_.c_str());
  return true;
}

bool DpuLink::replaced_on_disk() const noexcept {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return false;  // gone: the agent is making the new one
  return static_cast<uint64_t>(st.st_ino) != ino_ || static_cast<uint64_t>(st.st_dev) != dev_;
}

void DpuLink::detach() noexcept {
  munmap(base_, size_);
  base_ = nullptr;
  cmd_ = evt_ = nullptr;
  unsent_n_ = 0;
  ch_->rings_replaced();
  ++reattached_;
  if (log_) log_->info(kLogKey, "dpu-link: %s was replaced by the agent: mapping the new file", path_.c_str());
}

uint32_t DpuLink::service_in(uint64_t now) noexcept {
  // The agent replaces a file a worker scribbled on (the notice says so) and
  // may have made a new one while this worker was away from it: a stat now
  // and then, while not synchronised or when told, finds out (the notice
  // alone is in memory anyone mapping the file can write).
  if (base_ && now >= next_inode_check_) {
    const auto* n = std::launder(reinterpret_cast<const common::ChannelNotice*>(static_cast<uint8_t*>(base_) +
                                                                               common::kNoticeOffset));
    const RnicChannelState s = ch_->state();
    if (n->retired.load(std::memory_order_relaxed) != 0 ||
        (s != RnicChannelState::kActive && s != RnicChannelState::kSync)) {
      next_inode_check_ = now + kRetryNs;
      if (replaced_on_disk()) {
        detach();
        next_try_ = now;
      }
    }
  }
  if (!base_) {
    if (now >= next_try_) try_attach(now);
    if (!base_) return 0;
  }
  unsigned n = rte_ring_dequeue_burst_elem(cmd_, in_.data(), sizeof(common::RawMessage), in_.size(), nullptr);
  ch_->on_commands(in_.data(), n, now);
  ch_->tick(now);
  return n;
}

uint32_t DpuLink::service_out() noexcept {
  if (!base_) return 0;
  uint32_t moved = 0;
  // Events the ring had no room for wait in unsent_ (the channel keeps the rest
  // queued). A COMMITTED waits, with what follows it, until every lcore sees its version.
  const uint64_t visible = fanout_ ? fanout_->visible_version() : ~uint64_t{0};
  while (unsent_n_ < unsent_.size()) {
    const common::RawMessage* head = ch_->peek_event();
    if (head == nullptr) break;
    if (!port::commit_event_ready(*head, visible)) {
      ++commits_held_;
      break;
    }
    common::CommittedTable t;
    if (port::committed_table_of(*head, t)) shown_ = t;
    ch_->pop_event(unsent_[unsent_n_++]);
  }
  if (unsent_n_) {
    unsigned sent = rte_ring_enqueue_burst_elem(evt_, unsent_.data(), sizeof(common::RawMessage), unsent_n_, nullptr);
    for (unsigned i = sent; i < unsent_n_; ++i) unsent_[i - sent] = unsent_[i];
    unsent_n_ -= sent;
    moved += sent;
  }
  common::Bar& bar = common::channel_bar(base_);
  ch_->publish(bar, fanout_ ? &shown_ : nullptr);
  // Packet counters the channel object does not see.
  for (common::BarCounter c : {common::BarCounter::kRxPackets, common::BarCounter::kTxPackets,
                               common::BarCounter::kTableHits, common::BarCounter::kTableMisses,
                               common::BarCounter::kPunts, common::BarCounter::kPuntsDropped,
                               common::BarCounter::kDrops}) {
    std::size_t i = static_cast<std::size_t>(c);
    // Stored only when changed: an unchanged store still pulls the line from the agent's core.
    if (counters_[i] && bar.counters[i].value.load(std::memory_order_relaxed) != counters_[i])
      bar.counters[i].value.store(counters_[i], std::memory_order_relaxed);
  }
  return moved;
}

DpuLink::Punted DpuLink::punt(const common::EntryKey& key, const uint8_t* hdr, std::size_t len, uint16_t port,
                              uint64_t now) noexcept {
  ++counters_[static_cast<std::size_t>(common::BarCounter::kTableMisses)];
  if (!ch_) return Punted::kQuiet;
  // Egress keys (the only ones punted) carry the local vNIC in word0.
  const uint32_t vnic = budget_.index_of(key.word0, now);
  uint64_t h = (uint64_t{key.word0} << 32 | key.word1) * 0x9E3779B97F4A7C15ull ^ static_cast<uint8_t>(key.kind);
  Recent& r = recent_[vnic * kRecentPerVnic + (h >> 60) % kRecentPerVnic];
  const uint64_t version = table_.version();
  uint64_t wait = kRepuntNs;
  if (r.key == key && r.version == version) {
    if (now - r.at < r.wait) return Punted::kQuiet;
    // Asked again right away: back off; quiet for a while: a fresh miss.
    wait = now - r.at > 2 * r.wait ? kRepuntNs : std::min(2 * r.wait, kRepuntMaxNs);
  }
  r.key = key;
  r.version = version;
  r.at = now;
  // Over its vNIC's budget: no slot, no agent work; the key comes back after
  // kRepuntNs, not on every loop iteration.
  if (!budget_.admit_at(vnic, now)) {
    r.wait = kRepuntNs;
    ++counters_[static_cast<std::size_t>(common::BarCounter::kPuntsDropped)];
    return Punted::kOverBudget;
  }
  r.wait = wait;
  auto* hd = static_cast<common::ChannelHeader*>(base_);
  uint32_t slot = next_slot_++ % hd->geometry.slot_count;
  uint32_t gen = common::slot_write(base_, slot, hdr, len);
  std::size_t cap = common::slot_payload_capacity(hd->geometry);
  ch_->punt(slot, gen, static_cast<uint16_t>(len < cap ? len : cap), port, key);
  ++counters_[static_cast<std::size_t>(common::BarCounter::kPunts)];
  return Punted::kSent;
}

}  // namespace tandem::rnic::dpdk
