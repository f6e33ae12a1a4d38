// Punt resolutions submitted to one RNIC and not answered yet: which missed
// keys are being installed (a repeated punt of one is not resolved again),
// what each resolution puts (to revalidate it when it commits), and which
// ingress keys they put (a resolution checks a shared ingress key against
// these as well as against the committed shadow). Entries live in a slab
// indexed by three flat open-addressing tables (by missed key, by change-set
// tag, by ingress key put), so a new flow allocates nothing here in steady
// state; the node-based maps it replaces cost two allocations and frees per
// flow.
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
  // The ingress entry a pending resolution puts under `k`, or nullptr: what
  // the RNIC will hold there once that resolution commits.
  const common::Level2Entry* ingress_put(const common::EntryKey& k) const noexcept;
  bool erase(uint64_t tag) noexcept;
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  // Slab indices in open addressing (linear probing, backward-shift deletion,
  // load <= 1/2); `by` picks which field of the slab entry is the key.
  enum class By { kMissed, kTag, kIngress };
  struct Index {
    std::vector<uint32_t> slots;
    std::size_t mask = 0;
    std::size_t size = 0;
  };
  static uint64_t hash_key(const common::EntryKey& k) noexcept;
  static uint64_t hash_tag(uint64_t tag) noexcept;
  // The ingress entry slab entry `e` puts (change_set_for_miss puts it
  // second), or nullptr.
  static const common::Level2Entry* ingress_of(const Entry& e) noexcept {
    return e.n_puts == kMaxPuts && e.puts[1].key.kind != common::EntryKind::kEgress ? &e.puts[1] : nullptr;
  }
  uint64_t hash_of(uint32_t idx, By by) const noexcept {
    switch (by) {
      case By::kTag: return hash_tag(slab_[idx].tag);
      case By::kIngress: return hash_key(slab_[idx].puts[1].key);
      default: return hash_key(slab_[idx].missed);
    }
  }
  uint32_t find_key(const common::EntryKey& k) const noexcept;
  uint32_t find_tag(uint64_t tag) const noexcept;
  void insert(Index& ix, By by, uint32_t idx);
  void remove(Index& ix, By by, uint32_t idx) noexcept;
  void grow(Index& ix, By by);

  std::vector<Entry> slab_;
  std::vector<uint32_t> free_;
  Index by_key_, by_tag_, by_ingress_;
  std::size_t size_ = 0;
};

}  // namespace tandem::dpu
