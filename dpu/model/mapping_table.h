// The level-1 overlay->underlay mapping table: (tenant VNI, overlay IPv4) ->
// (underlay IPv4, next-hop MAC, RNIC). Sized for 16M entries in ordinary
// memory: a flat open-addressing array of 20-byte slots with linear probing and
// backward-shift deletion (no tombstones), grown at 80% load, so it costs
// 25-50 bytes per entry instead of the ~70+ of a node-based std::unordered_map.
// Single-threaded (the agent's control thread owns it); const members may
// run on another thread while the owner only reads (grown()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "common/channel/huge_page_allocator.h"
#include "common/wire/headers.h"

namespace tandem::dpu {

struct MappingKey {
  uint32_t vni = 0;         // tenant (24 bits)
  uint32_t overlay_ip = 0;  // host order
  friend bool operator==(const MappingKey&, const MappingKey&) = default;
};

struct Mapping {
  uint32_t underlay_ip = 0;     // host order
  common::MacAddr next_hop_mac{};
  uint16_t rnic = 0;            // RNIC id (index into the agent's RNIC name registry)
  friend bool operator==(const Mapping&, const Mapping&) = default;
};

class MappingTable {
 public:
  MappingTable() { rehash(16); }

  // Inserts or replaces; returns true if the key was new.
  bool upsert(const MappingKey& k, const Mapping& m);
  std::optional<Mapping> find(const MappingKey& k) const noexcept;
  // Looks up n keys (prefetching their home slots first, so the cache misses
  // overlap); out[i] is valid where hit[i]. Returns the number of hits.
  std::size_t find_bulk(const MappingKey* keys, std::size_t n, Mapping* out, bool* hit) const noexcept;
  bool erase(const MappingKey& k) noexcept;
  void reserve(std::size_t n);  // avoid rehashes during a bulk import
  // A copy with room for n entries (what reserve(n) would leave), built from
  // this table without changing it: a bulk import builds it on another
  // thread while the agent keeps reading this one (16M mappings take seconds
  // to rehash), then takes it with swap().
  MappingTable grown(std::size_t n) const;
  // Slots reserve(n) would want (it grows when this exceeds slots()).
  static std::size_t grown_slots(std::size_t n) noexcept;
  void swap(MappingTable& o) noexcept {
    slots_.swap(o.slots_);
    std::swap(mask_, o.mask_);
    std::swap(size_, o.size_);
  }
  void clear();

  std::size_t size() const noexcept { return size_; }
  std::size_t slots() const noexcept { return slots_.size(); }
  std::size_t memory_bytes() const noexcept { return slots_.capacity() * sizeof(Slot); }

  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.vni != kEmpty) f(MappingKey{s.vni, s.overlay_ip}, Mapping{s.underlay_ip, s.mac, s.rnic});
  }

 private:
  static constexpr uint32_t kEmpty = 0xFFFFFFFF;  // never a VNI (24 bits)
  struct Slot {
    uint32_t vni = kEmpty;
    uint32_t overlay_ip = 0;
    uint32_t underlay_ip = 0;
    common::MacAddr mac{};
    uint16_t rnic = 0;
  };
  static_assert(sizeof(Slot) == 20);

  std::size_t home(const MappingKey& k) const noexcept;
  void rehash(std::size_t n_slots);

  std::vector<Slot, common::HugePageAllocator<Slot>> slots_;  // up to 16M entries: huge pages
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace tandem::dpu
