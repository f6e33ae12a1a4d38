// DPU mode on several lcores (tandem-rnic --lcores N --dpu-channel): lcore 0 is
// the one consumer of the agent's channel and the one writer of the shared
// level-2 table; the other lcores get the channel's work by message. Why one
// consumer rather than a channel queue per lcore: rnic/dpdk/README.md "DPU mode
// on several lcores".
//
// The transactional rule across lcores. Every lcore reads the table at a
// version it adopted between two loop iterations (LcoreView, agent_link.h),
// never at "the newest", so a commit reaches an lcore whole, at one point of
// its loop, together with the vNIC list of that version: a packet on lcore k
// sees all of the old version or all of the new. Lcore 0, after the channel
// took the agent's commands, publishes the committed version (publish); each
// lcore adopts it (adopt), updates what it derives from it (vNICs, route
// waits) and acknowledges (acknowledge). The agent is told COMMITTED only when
// every lcore has acknowledged that version (commit_event_ready on the head of
// the channel's events), and the BAR shows that version, not a newer one.
//
// Memory: an lcore reading at an older version holds its epoch (the one
// published with that version) back from the table's reclaim (min_active), so
// what its version still shows is neither unlinked nor freed under it.
//
// Punts: an lcore other than 0 hands its misses to lcore 0 over an SPSC ring
// (hand_punt / drain_punts), which asks the agent through the channel with the
// same per-key and per-vNIC limits as its own. Sans-I/O: no clock, no DPDK.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/channel/messages.h"
#include "rnic/host/spsc_queue.h"
#include "rnic/port/agent_link.h"
#include "rnic/table/level2_table.h"
#include "rnic/table/reader_epochs.h"
#include "rnic/table/rnic_channel.h"

namespace tandem::rnic::port {

// May `m`, the head of the channel's events, go to the agent when every lcore
// sees version `visible`? A COMMITTED, or a HELLO_ACK naming a committed
// version, waits until the version is visible; the rest wait behind them (in order).
bool commit_event_ready(const common::RawMessage& m, uint64_t visible) noexcept;
// The committed table a COMMITTED or HELLO_ACK names (false for other events).
bool committed_table_of(const common::RawMessage& m, common::CommittedTable& out) noexcept;

class CommitFanout final : public ReclaimBound {
 public:
  static constexpr std::size_t kPuntRing = 256;
  static constexpr uint64_t kIdle = ~uint64_t{0};

  CommitFanout(const Level2Table& table, uint32_t lcores);

  uint32_t lcores() const noexcept { return n_; }

  // ---- lcore 0, the channel's consumer and the table's writer
  // After the channel took the agent's commands: publishes the table's committed
  // version, the channel's vNICs and state if any moved, or the table's epoch
  // (an lcore adopting it lets the writer reclaim). ch: nullptr while no channel
  // is mapped. True: a new view.
  bool publish(const RnicChannel* ch);
  // ReclaimBound: no lcore reads at an older epoch than this (the channel's tick reclaims up to it).
  uint64_t min_active(const Level2Table& t) const noexcept override;
  // The newest version every lcore has acknowledged.
  uint64_t visible_version() const noexcept;
  // Misses lcores 1..N-1 handed over: f(key) each, at most `max` a call.
  template <class F>
  uint32_t drain_punts(F&& f, uint32_t max = 256) {
    uint32_t n = 0;
    common::EntryKey key;
    for (uint32_t k = 1; k < n_; ++k)
      while (n < max && punts_[k]->pop(&key)) {
        f(key);
        ++n;
      }
    return n;
  }
  // The lcores' packet counters summed (for the BAR).
  uint64_t rx_packets() const noexcept;
  uint64_t tx_packets() const noexcept;

  // ---- lcore k, between two iterations (no table pointer held)
  // Copies the newest publication into `v` if it moved; true if it did.
  bool adopt(uint32_t k, LcoreView& v);
  // Lcore k has applied `version` everywhere (vNICs, route waits): packets it processes see it.
  void acknowledge(uint32_t k, uint64_t version) noexcept { slots_[k].version.store(version, std::memory_order_release); }
  // A miss for lcore 0 to punt; false: the ring is full (the key comes back on a later miss).
  bool hand_punt(uint32_t k, const common::EntryKey& key) noexcept { return punts_[k]->push(key); }
  // The channel is ACTIVE (as last published).
  bool active() const noexcept { return active_.load(std::memory_order_relaxed); }
  // Stored only when changed: an idle lcore leaves the line in lcore 0's cache.
  void note_packets(uint32_t k, uint64_t rx, uint64_t tx) noexcept {
    Packets& p = packets_[k];
    if (p.rx.load(std::memory_order_relaxed) != rx) p.rx.store(rx, std::memory_order_relaxed);
    if (p.tx.load(std::memory_order_relaxed) != tx) p.tx.store(tx, std::memory_order_relaxed);
  }

 private:
  // Written by lcore k once per commit, read by lcore 0 every iteration.
  struct alignas(64) Slot {
    std::atomic<uint64_t> epoch{kIdle};  // the epoch lcore k reads at (kIdle: not yet)
    std::atomic<uint64_t> version{0};    // the version it acknowledged
  };
  // Written by lcore k as it sends and receives: a line of its own.
  struct alignas(64) Packets {
    std::atomic<uint64_t> rx{0}, tx{0};
  };
  const Level2Table& table_;
  uint32_t n_;
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<Packets[]> packets_;
  std::vector<std::unique_ptr<host::SpscQueue<common::EntryKey, kPuntRing>>> punts_;  // [k]; [0] unused
  // pub_ changes on publish and is copied on adopt, under mu_: once per commit
  // (or reclaim) and lcore, never per packet, and only tried (a busy lock means
  // "next iteration"), so no lcore ever waits for another. Holding it while an
  // lcore stores its epoch keeps the writer from publishing (and then
  // reclaiming past) it meanwhile.
  mutable std::mutex mu_;
  LcoreView pub_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> pub_epoch_;
  std::atomic<bool> active_{false};
};

// Lcore k's AgentLink: the view it adopted, the channel's state as lcore 0
// published it, and its misses: lcore 0's to `direct` (the channel), the
// others' to lcore 0 by message, each key at most once per kRehandNs and
// version (the channel's own limits apply on lcore 0).
class LcoreAgent final : public AgentLink {
 public:
  static constexpr uint64_t kRehandNs = 1'000'000;
  static constexpr std::size_t kRecent = 16;

  struct Counters {
    uint64_t views_adopted = 0;
    uint64_t punts_handed = 0;     // misses handed to lcore 0
    uint64_t punts_ring_full = 0;  // not handed: lcore 0's ring full
    uint64_t punts_repeated = 0;   // not handed: the same key already was, this version, within kRehandNs
  };

  // direct: lcore 0's channel; nullptr on the other lcores.
  LcoreAgent(CommitFanout& fanout, uint32_t k, PuntSink* direct) noexcept : fanout_(fanout), k_(k), direct_(direct) {}

  void punt(const common::EntryKey& key, uint64_t now) noexcept override;
  bool active() const noexcept override { return fanout_.active(); }
  const LcoreView* view() const noexcept override { return &view_; }

  // Between iterations: the newest view, if it moved (true).
  bool adopt() {
    if (!fanout_.adopt(k_, view_)) return false;
    ++k_counters_.views_adopted;
    return true;
  }
  // After the port logic followed the view (PortLogic::follow_agent).
  void acknowledge() noexcept {
    if (view_.snap.version != acked_) {
      acked_ = view_.snap.version;
      fanout_.acknowledge(k_, acked_);
    }
  }
  const Counters& counters() const noexcept { return k_counters_; }
  uint32_t index() const noexcept { return k_; }

 private:
  struct Recent {
    common::EntryKey key;
    uint64_t at = 0;
    uint64_t version = ~uint64_t{0};
  };
  CommitFanout& fanout_;
  uint32_t k_;
  PuntSink* direct_;
  LcoreView view_;
  uint64_t acked_ = ~uint64_t{0};
  Recent recent_[kRecent];
  Counters k_counters_;
};

}  // namespace tandem::rnic::port
