// Punt resolutions submitted to one RNIC and not answered yet: which missed
// keys are being installed (a repeated punt of one is not resolved again) and
// what each resolution puts (to revalidate it when it commits). Entries live
// in a slab indexed by two flat open-addressing tables (by missed key, by
// change-set tag), so a new flow allocates nothing here in steady state; the
// node-based maps it replaces cost two allocations and frees per flow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/channel/messages.h"
#include "dpu/txn/change_set.h"

namespace tandem::dpu {

class PendingPunts {
 public:
  // What change_set_for_miss puts: the egress entry and the ingress entry.
  static constexpr std::size_t kMaxPuts = 2;

  struct Entry {
    uint64_t tag = 0;
    uint64_t level1_generation = 0;  // Level1State::generation() it was resolved at; 0: unknown
    common::EntryKey missed;
    uint32_t n_puts = 0;
    common::Level2Entry puts[kMaxPuts];
    std::span<const common::Level2Entry> installs() const noexcept { return {puts, n_puts}; }
  };

  bool contains(const common::EntryKey& missed) const noexcept;
  // Records cs (its tag and PUTs) as the resolution of `missed`, computed
  // against level 1 at `level1_generation` (0: unknown, always revalidated).
  // False, and nothing recorded, if `missed` is pending already, cs.tag is in
  // use, or cs puts more than kMaxPuts entries.
  bool add(const common::EntryKey& missed, const ChangeSet& cs, uint64_t level1_generation = 0);
  // The resolution submitted with change-set tag `tag`, or nullptr.
  const Entry* find(uint64_t tag) const noexcept;
  bool erase(uint64_t tag) noexcept;
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  // Slab indices in open addressing (linear probing, backward-shift deletion,
  // load <= 1/2); `by_tag` picks which field of the slab entry is the key.
  struct Index {
    std::vector<uint32_t> slots;
    std::size_t mask = 0;
  };
  static uint64_t hash_key(const common::EntryKey& k) noexcept;
  static uint64_t hash_tag(uint64_t tag) noexcept;
  uint64_t hash_of(uint32_t idx, bool by_tag) const noexcept {
    return by_tag ? hash_tag(slab_[idx].tag) : hash_key(slab_[idx].missed);
  }
  uint32_t find_key(const common::EntryKey& k) const noexcept;
  uint32_t find_tag(uint64_t tag) const noexcept;
  void insert(Index& ix, bool by_tag, uint32_t idx);
  void remove(Index& ix, bool by_tag, uint32_t idx) noexcept;
  void grow(Index& ix, bool by_tag);

  std::vector<Entry> slab_;
  std::vector<uint32_t> free_;
  Index by_key_, by_tag_;
  std::size_t size_ = 0;
};

}  // namespace tandem::dpu
