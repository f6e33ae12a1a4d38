// Tracks which table epoch each reader (packet-processing thread) is inside,
// so the writer can tell Level2Table::reclaim() what no reader can reach.
// A reader brackets each burst with enter()/exit(); the writer calls
// min_active() and passes the result to reclaim().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "rnic/table/level2_table.h"

namespace tandem::rnic {

// What the table's writer may reclaim up to: the smallest Snapshot::epoch a
// reader may still be using (ReaderEpochs; rnic/port's CommitFanout for lcores
// that read at a version they adopted).
class ReclaimBound {
 public:
  virtual ~ReclaimBound() = default;
  virtual uint64_t min_active(const Level2Table& t) const noexcept = 0;
};

class ReaderEpochs final : public ReclaimBound {
 public:
  static constexpr uint64_t kIdle = ~uint64_t{0};

  explicit ReaderEpochs(unsigned readers)
      : n_(readers), slots_(std::make_unique<Slot[]>(readers)) {}

  // Registers the reader at the current epoch *before* taking the snapshot, so
  // a writer that does not see the registration is guaranteed the snapshot is
  // at least as new as the epoch it scanned at.
  Level2Table::Snapshot enter(unsigned reader, const Level2Table& t) noexcept {
    slots_[reader].epoch.store(t.begin_read().epoch, std::memory_order_seq_cst);
    return t.begin_read();
  }
  void exit(unsigned reader) noexcept {
    slots_[reader].epoch.store(kIdle, std::memory_order_release);
  }

  // Writer: the smallest epoch any reader may still be using.
  uint64_t min_active(const Level2Table& t) const noexcept override {
    uint64_t m = t.begin_read().epoch;
    for (unsigned i = 0; i < n_; ++i) {
      uint64_t e = slots_[i].epoch.load(std::memory_order_seq_cst);
      if (e < m) m = e;
    }
    return m;
  }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> epoch{kIdle};
  };
  unsigned n_;
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace tandem::rnic
