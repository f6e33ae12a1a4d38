// Linear-probing mapping table with backward-shift deletion.
#include "dpu/model/mapping_table.h"

#include <algorithm>
#include <bit>

namespace tandem::dpu {

std::size_t MappingTable::home(const MappingKey& k) const noexcept {
  uint64_t x = (uint64_t{k.vni} << 32) | k.overlay_ip;
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<std::size_t>(x) & mask_;
}

void MappingTable::rehash(std::size_t n_slots) {
  decltype(slots_) old;
  old.swap(slots_);
  slots_.assign(n_slots, Slot{});
  slots_.shrink_to_fit();
  mask_ = n_slots - 1;
  size_ = 0;
  for (const Slot& s : old)
    if (s.vni != kEmpty) upsert({s.vni, s.overlay_ip}, {s.underlay_ip, s.mac, s.rnic});
}

std::size_t MappingTable::grown_slots(std::size_t n) noexcept {
  return std::bit_ceil(std::max<std::size_t>(16, n + n / 4 + 1));  // <= 80% load
}

void MappingTable::reserve(std::size_t n) {
  std::size_t need = grown_slots(n);
  if (need > slots_.size()) rehash(need);
}

MappingTable MappingTable::grown(std::size_t n) const {
  MappingTable t;
  t.rehash(std::max(grown_slots(n), slots_.size()));
  for (const Slot& s : slots_)
    if (s.vni != kEmpty) t.upsert({s.vni, s.overlay_ip}, {s.underlay_ip, s.mac, s.rnic});
  return t;
}

void MappingTable::clear() {
  slots_.assign(16, Slot{});
  slots_.shrink_to_fit();
  mask_ = 15;
  size_ = 0;
}

bool MappingTable::upsert(const MappingKey& k, const Mapping& m) {
  if ((size_ + 1) * 5 > slots_.size() * 4) rehash(slots_.size() * 2);
  for (std::size_t i = home(k);; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.vni == kEmpty || (s.vni == k.vni && s.overlay_ip == k.overlay_ip)) {
      bool fresh = s.vni == kEmpty;
      s = Slot{k.vni, k.overlay_ip, m.underlay_ip, m.next_hop_mac, m.rnic};
      size_ += fresh;
      return fresh;
    }
  }
}

std::optional<Mapping> MappingTable::find(const MappingKey& k) const noexcept {
  for (std::size_t i = home(k);; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.vni == kEmpty) return std::nullopt;
    if (s.vni == k.vni && s.overlay_ip == k.overlay_ip) return Mapping{s.underlay_ip, s.mac, s.rnic};
  }
}

std::size_t MappingTable::find_bulk(const MappingKey* keys, std::size_t n, Mapping* out,
                                   bool* hit) const noexcept {
  constexpr std::size_t kChunk = 32;
  std::size_t homes[kChunk];
  std::size_t hits = 0;
  for (std::size_t base = 0; base < n; base += kChunk) {
    std::size_t m = std::min(kChunk, n - base);
    for (std::size_t i = 0; i < m; ++i) {
      homes[i] = home(keys[base + i]);
      __builtin_prefetch(&slots_[homes[i]]);
    }
    for (std::size_t i = 0; i < m; ++i) {
      const MappingKey& k = keys[base + i];
      hit[base + i] = false;
      for (std::size_t j = homes[i];; j = (j + 1) & mask_) {
        const Slot& s = slots_[j];
        if (s.vni == kEmpty) break;
        if (s.vni == k.vni && s.overlay_ip == k.overlay_ip) {
          out[base + i] = Mapping{s.underlay_ip, s.mac, s.rnic};
          hit[base + i] = true;
          ++hits;
          break;
        }
      }
    }
  }
  return hits;
}

bool MappingTable::erase(const MappingKey& k) noexcept {
  std::size_t i = home(k);
  for (;; i = (i + 1) & mask_) {
    if (slots_[i].vni == kEmpty) return false;
    if (slots_[i].vni == k.vni && slots_[i].overlay_ip == k.overlay_ip) break;
  }
  // Backward shift: pull later members of the probe run into the hole so
  // lookups never need tombstones.
  std::size_t hole = i;
  for (std::size_t j = (i + 1) & mask_; slots_[j].vni != kEmpty; j = (j + 1) & mask_) {
    std::size_t h = home({slots_[j].vni, slots_[j].overlay_ip});
    // Move j into hole if its home is not cyclically in (hole, j].
    bool in_range = hole <= j ? (h > hole && h <= j) : (h > hole || h <= j);
    if (!in_range) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole] = Slot{};
  --size_;
  return true;
}

}  // namespace tandem::dpu
