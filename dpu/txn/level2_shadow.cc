// Level-2 shadow bookkeeping.
#include "dpu/txn/level2_shadow.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <type_traits>

namespace tandem::dpu {

using common::EntryKey;
using common::EntryKind;
using common::Level2Entry;

// --- EntryMap ----------------------------------------------------------------

const Level2Entry* EntryMap::find(const EntryKey& k) const noexcept {
  if (size_ == 0 || k.kind == EntryKind::kInvalid) return nullptr;
  for (std::size_t i = home(k);; i = (i + 1) & mask_) {
    const value_type& s = slots_[i];
    if (s.first.kind == EntryKind::kInvalid) return nullptr;
    if (s.first == k) return &s.second;
  }
}

std::pair<Level2Entry*, bool> EntryMap::find_or_insert(const EntryKey& k) {
  if ((size_ + 1) * 4 > n_slots_ * 3) rehash(n_slots_ == 0 ? 16 : n_slots_ * 2);
  for (std::size_t i = home(k);; i = (i + 1) & mask_) {
    value_type& s = slots_[i];
    if (s.first == k) return {&s.second, false};
    if (s.first.kind == EntryKind::kInvalid) {
      s.first = k;
      s.second = Level2Entry();
      s.second.key = k;
      ++size_;
      return {&s.second, true};
    }
  }
}

bool EntryMap::erase(const EntryKey& k) noexcept {
  if (size_ == 0 || k.kind == EntryKind::kInvalid) return false;
  std::size_t i = home(k);
  for (;; i = (i + 1) & mask_) {
    if (slots_[i].first.kind == EntryKind::kInvalid) return false;
    if (slots_[i].first == k) break;
  }
  // Backward shift: pull later entries of the probe run into the hole unless
  // their home lies cyclically in (hole, their slot], so no tombstones.
  for (std::size_t j = i;;) {
    j = (j + 1) & mask_;
    if (slots_[j].first.kind == EntryKind::kInvalid) break;
    std::size_t h = home(slots_[j].first);
    bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
    if (stays) continue;
    slots_[i] = slots_[j];
    i = j;
  }
  std::memset(static_cast<void*>(&slots_[i]), 0, sizeof(value_type));
  --size_;
  return true;
}

void EntryMap::clear() noexcept {
  if (n_slots_ != 0) std::memset(static_cast<void*>(slots_), 0, n_slots_ * sizeof(value_type));
  size_ = 0;
}

void EntryMap::reserve(std::size_t n, bool populate) {
  std::size_t want = 16;
  while (want * 3 < n * 4) want *= 2;
  if (want > n_slots_) rehash(want, populate);
}

namespace {

using Slot = EntryMap::value_type;
static_assert(std::is_trivially_copyable_v<EntryKey> && std::is_trivially_copyable_v<Level2Entry> &&
              std::is_trivially_destructible_v<Slot> && sizeof(Slot) == sizeof(EntryKey) + sizeof(Level2Entry));
static_assert(static_cast<uint8_t>(EntryKind::kInvalid) == 0, "an all-zero slot must read as empty");

Slot* alloc_zeroed(std::size_t n, bool populate) {
  const std::size_t bytes = n * sizeof(Slot);
  if (bytes < common::kHugePageBytes) {
    void* p = ::operator new(bytes, std::align_val_t{alignof(Slot)});
    std::memset(p, 0, bytes);
    return static_cast<Slot*>(p);
  }
  void* p = common::map_huge(bytes);  // zero-filled by the kernel on first touch
#ifdef MADV_POPULATE_WRITE
  if (populate) ::madvise(p, bytes, MADV_POPULATE_WRITE);  // Linux >= 5.14; else faulted on use
#else
  (void)populate;
#endif
  return static_cast<Slot*>(p);
}

void free_slots(Slot* p, std::size_t n) noexcept {
  if (!p) return;
  const std::size_t bytes = n * sizeof(Slot);
  if (bytes < common::kHugePageBytes)
    ::operator delete(p, std::align_val_t{alignof(Slot)});
  else
    common::unmap_huge(p, bytes);
}

}  // namespace

EntryMap::EntryMap(const EntryMap& o) : size_(o.size_), mask_(o.mask_), shift_(o.shift_) {
  if (o.n_slots_ == 0) return;
  slots_ = alloc_zeroed(o.n_slots_, false);
  n_slots_ = o.n_slots_;
  std::memcpy(static_cast<void*>(slots_), o.slots_, n_slots_ * sizeof(value_type));
}

EntryMap::~EntryMap() { free_slots(slots_, n_slots_); }

void EntryMap::swap(EntryMap& o) noexcept {
  std::swap(slots_, o.slots_);
  std::swap(n_slots_, o.n_slots_);
  std::swap(size_, o.size_);
  std::swap(mask_, o.mask_);
  std::swap(shift_, o.shift_);
}

void EntryMap::rehash(std::size_t slots, bool populate) {
  Slot* old = slots_;
  const std::size_t old_n = n_slots_;
  slots_ = alloc_zeroed(slots, populate);
  n_slots_ = slots;
  mask_ = slots - 1;
  shift_ = 64;
  for (std::size_t s = slots; s > 1; s >>= 1) --shift_;
  size_ = 0;
  for (std::size_t i = 0; i < old_n; ++i)
    if (old[i].first.kind != EntryKind::kInvalid) *find_or_insert(old[i].first).first = old[i].second;
  free_slots(old, old_n);
}

// --- Level2Shadow --------------------------------------------------------------

namespace {
// Small transactions (the common case: a few punts) find a key's other ops by
// scanning; larger ones index the ops.
constexpr std::size_t kScanLimit = 64;
// Ops whose shadow slot is prefetched ahead of the one being looked up: a
// large shadow misses the cache on nearly every op, and the misses overlap.
constexpr std::size_t kAhead = 8;

// Latest op index per key within one txn: a flat table of op indices.
class OpIndex {
 public:
  static constexpr uint32_t kNone = ~uint32_t{0};
  explicit OpIndex(const std::vector<Level2Op>& ops) : ops_(ops) {
    std::size_t n = 16;
    while (n < ops.size() * 2) n *= 2;
    slots_.assign(n, kNone);
    mask_ = n - 1;
    for (std::size_t s = n; s > 1; s >>= 1) --shift_;
  }
  // Stores i as key's latest op; returns the one stored before, or kNone.
  uint32_t exchange(const EntryKey& k, uint32_t i) noexcept {
    for (std::size_t p = (EntryKeyHash{}(k) * 0x9E3779B97F4A7C15ull) >> shift_;; p = (p + 1) & mask_) {
      uint32_t& s = slots_[p];
      if (s == kNone || ops_[s].entry.key == k) return std::exchange(s, i);
    }
  }
  uint32_t find(const EntryKey& k) const noexcept {
    for (std::size_t p = (EntryKeyHash{}(k) * 0x9E3779B97F4A7C15ull) >> shift_;; p = (p + 1) & mask_) {
      uint32_t s = slots_[p];
      if (s == kNone || ops_[s].entry.key == k) return s;
    }
  }

 private:
  const std::vector<Level2Op>& ops_;
  std::vector<uint32_t> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
};
}  // namespace

common::TableDigest Level2Shadow::digest_after(const std::vector<Level2Op>& ops) const {
  return digest_after(ops, nullptr, digest_);
}

common::TableDigest Level2Shadow::digest_after(const std::vector<Level2Op>& ops, const std::vector<Level2Op>& earlier,
                                               const common::TableDigest& after_earlier) const {
  return digest_after(ops, &earlier, after_earlier);
}

common::TableDigest Level2Shadow::digest_after(const std::vector<Level2Op>& ops, const std::vector<Level2Op>* earlier,
                                               common::TableDigest d) const {
  // Later ops see earlier ones: an op's "current" entry is the last earlier op
  // on the same key, else the last op on it in `earlier`, else the committed one.
  const bool indexed = ops.size() > kScanLimit;
  std::optional<OpIndex> last;
  if (indexed) last.emplace(ops);
  std::optional<OpIndex> before;
  if (earlier && earlier->size() > kScanLimit) {
    before.emplace(*earlier);
    for (std::size_t i = 0; i < earlier->size(); ++i) before->exchange((*earlier)[i].entry.key, static_cast<uint32_t>(i));
  }
  auto in_earlier = [&](const EntryKey& k) -> const Level2Op* {
    if (!earlier) return nullptr;
    if (before) {
      uint32_t p = before->find(k);
      return p == OpIndex::kNone ? nullptr : &(*earlier)[p];
    }
    for (std::size_t j = earlier->size(); j-- > 0;)
      if ((*earlier)[j].entry.key == k) return &(*earlier)[j];
    return nullptr;
  };
  for (std::size_t i = 0; i < ops.size() && i < kAhead; ++i) entries_.prefetch(ops[i].entry.key);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (i + kAhead < ops.size()) entries_.prefetch(ops[i + kAhead].entry.key);
    const Level2Op& op = ops[i];
    const Level2Op* prev = nullptr;
    if (indexed) {
      uint32_t p = last->exchange(op.entry.key, static_cast<uint32_t>(i));
      if (p != OpIndex::kNone) prev = &ops[p];
    } else {
      for (std::size_t j = i; j-- > 0;)
        if (ops[j].entry.key == op.entry.key) {
          prev = &ops[j];
          break;
        }
    }
    if (!prev) prev = in_earlier(op.entry.key);
    const Level2Entry* cur = prev ? (prev->del ? nullptr : &prev->entry) : find(op.entry.key);
    if (op.del) {
      if (cur) d.remove(*cur);
    } else {
      if (cur && *cur == op.entry) continue;  // same entry again: the RNIC treats it as a no-op
      if (cur) d.remove(*cur);
      d.add(op.entry);
    }
  }
  return d;
}

void Level2Shadow::apply(const std::vector<Level2Op>& ops, uint64_t new_version,
                         std::vector<Level2Entry>* net_puts, std::vector<EntryKey>* net_dels) {
  for (std::size_t i = 0; i < ops.size() && i < kAhead; ++i) entries_.prefetch(ops[i].entry.key);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (i + kAhead < ops.size()) entries_.prefetch(ops[i + kAhead].entry.key);
    const Level2Op& op = ops[i];
    if (op.entry.key.kind == EntryKind::kInvalid) continue;  // never committed: the RNIC refuses it
    if (op.del) {
      if (const Level2Entry* e = entries_.find(op.entry.key)) {
        digest_.remove(*e);
        count(op.entry.key, -1);
        entries_.erase(op.entry.key);
      }
      continue;
    }
    auto [e, inserted] = entries_.find_or_insert(op.entry.key);
    if (inserted) {
      digest_.add(op.entry);
      count(op.entry.key, +1);
      *e = op.entry;
    } else if (!(*e == op.entry)) {
      digest_.remove(*e);
      digest_.add(op.entry);
      *e = op.entry;
    }
  }
  version_ = new_version;
  if (!net_puts && !net_dels) return;
  // Net effect: the last op on each key decides (a put leaves exactly its entry).
  if (net_puts) net_puts->reserve(ops.size());
  auto emit = [&](const Level2Op& op) {
    if (op.entry.key.kind == EntryKind::kInvalid) return;
    if (!op.del && net_puts) net_puts->push_back(op.entry);
    if (op.del && net_dels) net_dels->push_back(op.entry.key);
  };
  if (ops.size() > kScanLimit) {
    OpIndex seen(ops);
    for (std::size_t i = ops.size(); i-- > 0;)
      if (seen.exchange(ops[i].entry.key, static_cast<uint32_t>(i)) == OpIndex::kNone) emit(ops[i]);
    return;
  }
  for (std::size_t i = ops.size(); i-- > 0;) {
    bool later = false;
    for (std::size_t j = i + 1; j < ops.size() && !later; ++j) later = ops[j].entry.key == ops[i].entry.key;
    if (!later) emit(ops[i]);
  }
}

void Level2Shadow::reset(uint64_t version, const std::vector<Level2Entry>& entries) {
  entries_.clear();
  entries_.reserve(entries.size());
  digest_ = {};
  for (const Level2Entry& e : entries) {  // last one wins
    if (e.key.kind == EntryKind::kInvalid) continue;
    *entries_.find_or_insert(e.key).first = e;
  }
  egress_by_vnic_.clear();
  for (const auto& [k, e] : entries_) {
    digest_.add(e);
    count(k, +1);
  }
  version_ = version;
}

void Level2Shadow::count(const EntryKey& k, int d) {
  if (k.kind != EntryKind::kEgress) return;
  auto it = egress_by_vnic_.try_emplace(k.word0, 0).first;
  it->second += d;
  if (it->second == 0) egress_by_vnic_.erase(it);
}

std::size_t Level2Shadow::forget(EntryKind kind) {
  std::vector<EntryKey> gone;
  for (const auto& [k, e] : entries_)
    if (k.kind == kind) gone.push_back(k);
  for (const EntryKey& k : gone) {
    digest_.remove(*entries_.find(k));
    count(k, -1);
    entries_.erase(k);
  }
  return gone.size();
}

std::vector<Level2Entry> Level2Shadow::snapshot() const {
  std::vector<Level2Entry> out;
  out.reserve(entries_.size());
  for (const auto& [k, e] : entries_) out.push_back(e);
  return out;
}

void Level2Shadow::presize(uint32_t capacity) {
  entries_.reserve(std::min(capacity, kPresizeLimit), /*populate=*/true);
}

}  // namespace tandem::dpu
