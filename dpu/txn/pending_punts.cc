// Pending punt resolutions: slab + three flat indices.
#include "dpu/txn/pending_punts.h"

namespace tandem::dpu {

using common::EntryKey;

uint64_t PendingPunts::hash_key(const EntryKey& k) noexcept {
  uint64_t x = (uint64_t{k.word0} << 32 | k.word1) ^ (uint64_t{static_cast<uint8_t>(k.kind)} << 61);
  x *= 0x9E3779B97F4A7C15ull;
  return x ^ (x >> 29);
}

uint64_t PendingPunts::hash_tag(uint64_t tag) noexcept {
  uint64_t x = tag * 0x9E3779B97F4A7C15ull;
  return x ^ (x >> 29);
}

uint32_t PendingPunts::find_key(const EntryKey& k) const noexcept {
  if (size_ == 0) return kEmpty;
  for (std::size_t i = hash_key(k) & by_key_.mask;; i = (i + 1) & by_key_.mask) {
    uint32_t s = by_key_.slots[i];
    if (s == kEmpty || slab_[s].missed == k) return s;
  }
}

uint32_t PendingPunts::find_tag(uint64_t tag) const noexcept {
  if (size_ == 0) return kEmpty;
  for (std::size_t i = hash_tag(tag) & by_tag_.mask;; i = (i + 1) & by_tag_.mask) {
    uint32_t s = by_tag_.slots[i];
    if (s == kEmpty || slab_[s].tag == tag) return s;
  }
}

bool PendingPunts::contains(const EntryKey& missed) const noexcept { return find_key(missed) != kEmpty; }

const PendingPunts::Entry* PendingPunts::find(uint64_t tag) const noexcept {
  uint32_t s = find_tag(tag);
  return s == kEmpty ? nullptr : &slab_[s];
}

const common::Level2Entry* PendingPunts::ingress_put(const EntryKey& k) const noexcept {
  if (by_ingress_.size == 0) return nullptr;
  for (std::size_t i = hash_key(k) & by_ingress_.mask;; i = (i + 1) & by_ingress_.mask) {
    uint32_t s = by_ingress_.slots[i];
    if (s == kEmpty) return nullptr;
    if (slab_[s].puts[1].key == k) return &slab_[s].puts[1];
  }
}

void PendingPunts::grow(Index& ix, By by) {
  std::size_t n = ix.slots.empty() ? 64 : ix.slots.size() * 2;
  std::vector<uint32_t> old(n, kEmpty);
  old.swap(ix.slots);
  ix.mask = n - 1;
  for (uint32_t s : old)
    if (s != kEmpty) {
      std::size_t i = hash_of(s, by) & ix.mask;
      while (ix.slots[i] != kEmpty) i = (i + 1) & ix.mask;
      ix.slots[i] = s;
    }
}

void PendingPunts::insert(Index& ix, By by, uint32_t idx) {
  if ((ix.size + 1) * 2 > ix.slots.size()) grow(ix, by);
  std::size_t i = hash_of(idx, by) & ix.mask;
  while (ix.slots[i] != kEmpty) i = (i + 1) & ix.mask;
  ix.slots[i] = idx;
  ++ix.size;
}

void PendingPunts::remove(Index& ix, By by, uint32_t idx) noexcept {
  std::size_t i = hash_of(idx, by) & ix.mask;
  while (ix.slots[i] != idx) i = (i + 1) & ix.mask;
  // Backward shift: pull later members of the probe run into the hole unless
  // their home lies cyclically in (hole, their slot].
  for (std::size_t j = i;;) {
    j = (j + 1) & ix.mask;
    uint32_t s = ix.slots[j];
    if (s == kEmpty) break;
    std::size_t h = hash_of(s, by) & ix.mask;
    bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
    if (stays) continue;
    ix.slots[i] = s;
    i = j;
  }
  ix.slots[i] = kEmpty;
  --ix.size;
}

bool PendingPunts::add(const EntryKey& missed, const ChangeSet& cs, uint64_t level1_generation) {
  if (find_key(missed) != kEmpty || find_tag(cs.tag) != kEmpty) return false;
  std::size_t puts = 0;
  for (const Level2Op& op : cs.ops) puts += !op.del;
  if (puts > kMaxPuts) return false;
  uint32_t idx;
  if (!free_.empty()) {
    idx = free_.back();
    free_.pop_back();
  } else {
    idx = static_cast<uint32_t>(slab_.size());
    slab_.emplace_back();
    if (free_.capacity() < slab_.capacity()) free_.reserve(slab_.capacity());  // erase() never allocates
  }
  Entry& e = slab_[idx];
  e.tag = cs.tag;
  e.level1_generation = level1_generation;
  e.missed = missed;
  e.n_puts = 0;
  for (const Level2Op& op : cs.ops)
    if (!op.del) e.puts[e.n_puts++] = op.entry;
  insert(by_key_, By::kMissed, idx);
  insert(by_tag_, By::kTag, idx);
  if (ingress_of(e)) insert(by_ingress_, By::kIngress, idx);
  ++size_;
  return true;
}

bool PendingPunts::erase(uint64_t tag) noexcept {
  uint32_t idx = find_tag(tag);
  if (idx == kEmpty) return false;
  remove(by_key_, By::kMissed, idx);
  remove(by_tag_, By::kTag, idx);
  if (ingress_of(slab_[idx])) remove(by_ingress_, By::kIngress, idx);
  free_.push_back(idx);  // within the capacity add() reserved
  --size_;
  return true;
}

}  // namespace tandem::dpu
