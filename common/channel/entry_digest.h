// Order-independent digest of a level-2 table, computed the same way by the
// agent (over what it installed) and the RNIC (over what it committed): the
// wrapping sum of a 64-bit hash of each entry. Equal digests and versions let
// a reconnecting agent skip the full replay; adding or removing one entry
// updates the digest in O(1).
#pragma once

#include <cstdint>

#include "common/channel/messages.h"

namespace tandem::common {

namespace detail {
constexpr uint64_t digest_mix(uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
constexpr uint64_t mac_word(const MacAddr& m) noexcept {
  uint64_t w = 0;
  for (uint8_t b : m) w = (w << 8) | b;
  return w;
}
}  // namespace detail

// Hash of the entry's fields (never of raw bytes, so padding cannot leak in).
inline uint64_t entry_hash(const Level2Entry& e) noexcept {
  using detail::digest_mix;
  uint64_t h = digest_mix(static_cast<uint64_t>(e.key.kind));
  h = digest_mix(h ^ ((uint64_t{e.key.word0} << 32) | e.key.word1));
  if (e.key.kind == EntryKind::kEgress) {
    const EgressAction& a = e.egress;
    h = digest_mix(h ^ ((uint64_t{a.underlay_src_ip} << 32) | a.underlay_dst_ip));
    h = digest_mix(h ^ (detail::mac_word(a.dst_mac) << 16 | a.path_set_id));
    h = digest_mix(h ^ ((uint64_t{a.vni} << 32) | (uint64_t{a.path_base_port} << 8) | a.path_count));
  } else if (e.key.kind == EntryKind::kVnic) {
    const VnicAction& a = e.vnic;
    h = digest_mix(h ^ ((uint64_t{a.vnic_id} << 32) | a.overlay_ip));
    h = digest_mix(h ^ (uint64_t{a.pkey} << 32 | a.vni));  // pkey 0 (below v4): as before
    h = digest_mix(h ^ detail::mac_word(a.overlay_mac));
  } else {
    const IngressAction& a = e.ingress;
    h = digest_mix(h ^ ((uint64_t{a.overlay_src_ip} << 32) | a.overlay_dst_ip));
    h = digest_mix(h ^ ((uint64_t{a.vni} << 32) | a.local_vnic_id));
    h = digest_mix(h ^ detail::mac_word(a.overlay_src_mac));
  }
  return h;
}

// Running digest: add() and remove() commute, so any insertion order of the
// same set of entries gives the same value. An empty table has digest 0.
struct TableDigest {
  uint64_t value = 0;
  uint32_t count = 0;

  void add(const Level2Entry& e) noexcept {
    value += entry_hash(e);
    ++count;
  }
  void remove(const Level2Entry& e) noexcept {
    value -= entry_hash(e);
    --count;
  }
  friend bool operator==(const TableDigest&, const TableDigest&) = default;
};

}  // namespace tandem::common
