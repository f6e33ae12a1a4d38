// The level-2 table's key hash: SipHash-1-3 keyed with a secret the RNIC
// draws at start (Level2TableConfig::hash_key) and never shows a tenant, so
// a tenant choosing overlay addresses cannot aim keys at another tenant's
// buckets (the unkeyed mix before it is invertible: preimages for any
// bucket and tag are a few multiplications away). SipHash-1-3, as Rust's
// and CPython's hash tables use against hash flooding; a seeded CRC would
// not do (CRC is linear: CRC(s, a) ^ CRC(s, b) does not depend on s).
#pragma once

#include <cstdint>

#include "common/channel/messages.h"

namespace tandem::rnic {

struct TableHashKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
};

namespace detail {
constexpr uint64_t rotl(uint64_t x, int b) noexcept { return (x << b) | (x >> (64 - b)); }
constexpr void sip_round(uint64_t& v0, uint64_t& v1, uint64_t& v2, uint64_t& v3) noexcept {
  v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
  v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
  v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
  v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
}
}  // namespace detail

// SipHash-1-3 of the key's 12 bytes as they lie in memory (kind, three zero
// reserved bytes, word0 and word1 little-endian): one compression round per
// 8-byte word, three finalization rounds.
constexpr uint64_t keyed_hash(const TableHashKey& key, const common::EntryKey& k) noexcept {
  uint64_t v0 = key.k0 ^ 0x736f6d6570736575ull, v1 = key.k1 ^ 0x646f72616e646f6dull;
  uint64_t v2 = key.k0 ^ 0x6c7967656e657261ull, v3 = key.k1 ^ 0x7465646279746573ull;
  const uint64_t m = uint64_t{static_cast<uint8_t>(k.kind)} | uint64_t{k.word0} << 32;
  v3 ^= m;
  detail::sip_round(v0, v1, v2, v3);
  v0 ^= m;
  const uint64_t b = uint64_t{12} << 56 | k.word1;  // length byte, the last 4 bytes
  v3 ^= b;
  detail::sip_round(v0, v1, v2, v3);
  v0 ^= b;
  v2 ^= 0xFF;
  detail::sip_round(v0, v1, v2, v3);
  detail::sip_round(v0, v1, v2, v3);
  detail::sip_round(v0, v1, v2, v3);
  return v0 ^ v1 ^ v2 ^ v3;
}

// The table's hash before it was keyed (a splitmix64 finalizer of the key):
// kept for tests and benchmarks that show what crafted keys did to it.
constexpr uint64_t unkeyed_hash(const common::EntryKey& k) noexcept {
  uint64_t x = (uint64_t{k.word0} << 32) | k.word1;
  x ^= uint64_t{static_cast<uint8_t>(k.kind)} * 0xD6E8FEB86659FD93ull;
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace tandem::rnic
