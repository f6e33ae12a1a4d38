// The level-2 table's keyed hash (rnic/table/key_hash.h): SipHash-1-3 as
// specified, and crafted keys. Keys computed against the unkeyed hash (by
// inverting it) or against a known secret (by search) fill a victim key's
// two buckets, so the victim's PUT is refused; under another secret the same
// keys scatter and the victim's entry is installed.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "rnic/table/key_hash.h"
#include "rnic/table/level2_table.h"

using namespace tandem::rnic;
using tandem::common::EgressAction;
using tandem::common::EntryKind;
using tandem::common::egress_key;
using tandem::common::make_egress_entry;

namespace {

Level2Entry egress(const EntryKey& k) {
  EgressAction a;
  a.underlay_src_ip = 0x0A000001;
  a.underlay_dst_ip = 0x0A000002;
  a.vni = 100;
  return make_egress_entry(k, a);
}

// Level2Table::buckets_of, restated: the two buckets and the tag of a hash.
struct Place {
  uint32_t b1, b2, tag;
};
Place place(uint64_t h, uint32_t buckets) {
  const uint32_t mask = buckets - 1, tag = static_cast<uint32_t>(h >> 32);
  const uint32_t b1 = static_cast<uint32_t>(h) & mask;
  return {b1, (b1 ^ static_cast<uint32_t>((uint64_t{tag} * 0x5BD1E995u) >> 7)) & mask, tag};
}
bool same_buckets(const Place& a, const Place& b) {
  return (a.b1 == b.b1 && a.b2 == b.b2) || (a.b1 == b.b2 && a.b2 == b.b1);
}

// unkeyed_hash run backwards: the egress key whose hash is h.
constexpr uint64_t inverse_mul(uint64_t a) {
  uint64_t x = a;  // Newton's iteration for a^-1 mod 2^64 (a odd)
  for (int i = 0; i < 6; ++i) x *= 2 - a * x;
  return x;
}
uint64_t unxorshift(uint64_t y, int s) {
  uint64_t x = y;
  for (int i = 0; i < 64 / s + 1; ++i) x = y ^ (x >> s);
  return x;
}
EntryKey unkeyed_preimage(uint64_t h) {
  uint64_t x = unxorshift(h, 31);
  x = unxorshift(x * inverse_mul(0x94D049BB133111EBull), 27);
  x = unxorshift(x * inverse_mul(0xBF58476D1CE4E5B9ull), 30);
  x -= 0x9E3779B97F4A7C15ull;
  x ^= uint64_t{static_cast<uint8_t>(EntryKind::kEgress)} * 0xD6E8FEB86659FD93ull;
  return egress_key(static_cast<uint32_t>(x >> 32), static_cast<uint32_t>(x));
}

uint64_t unkeyed(const EntryKey& k) noexcept { return unkeyed_hash(k); }

// Fills a table with the attacker's keys, then tries the victim's.
TableStatus victim_after(Level2Table& t, const std::vector<EntryKey>& attack, const EntryKey& victim) {
  REQUIRE(t.begin() == TableStatus::kOk);
  for (const EntryKey& k : attack) REQUIRE(t.put(egress(k)) == TableStatus::kOk);
  const TableStatus s = t.put(egress(victim));
  REQUIRE(t.commit() == TableStatus::kOk);
  return s;
}

constexpr uint32_t kCapacity = 1024;
const EntryKey kVictim = egress_key(7, 0x0A010203);  // red's vNIC 7 -> 10.1.2.3

}  // namespace

TEST_CASE("keyed_hash is SipHash-1-3 of the key's 12 bytes") {
  // CPython 3.11 hashes bytes with SipHash-1-3, under a zero key when
  // PYTHONHASHSEED=0: hash(bytes([kind, 0, 0, 0]) + struct.pack('<II', w0, w1)).
  const TableHashKey zero{};
  EntryKey k;
  k.kind = static_cast<EntryKind>(1);
  CHECK(keyed_hash(zero, k) == 0x812b00d8d1d44dcdull);
  k.kind = static_cast<EntryKind>(2);
  k.word0 = 0x0a000001;
  k.word1 = 0x0a000002;
  CHECK(keyed_hash(zero, k) == 0xd8f864e2a4b067a4ull);
  k.kind = static_cast<EntryKind>(3);
  k.word0 = 0xdeadbeef;
  k.word1 = 0x123456;
  CHECK(keyed_hash(zero, k) == 0x3dd802feec7beab7ull);
  // Every bit of the secret matters.
  for (int bit = 0; bit < 128; ++bit) {
    TableHashKey s;
    (bit < 64 ? s.k0 : s.k1) = uint64_t{1} << (bit % 64);
    CHECK(keyed_hash(s, k) != keyed_hash(zero, k));
  }
}

TEST_CASE("keys crafted against the unkeyed hash fill a victim's buckets, but not under a secret") {
  // Sixteen preimages of the victim's own bucket and tag (hashes that differ
  // only above the bucket mask): both of its buckets, eight slots each.
  Level2Table probe({kCapacity});
  const uint32_t nb = probe.buckets();
  const uint64_t hv = unkeyed_hash(kVictim);
  std::vector<EntryKey> attack;
  for (uint64_t j = 1; attack.size() < 2 * Level2Table::kSlotsPerBucket; ++j) {
    const uint64_t h = (hv & 0xFFFFFFFF00000000ull) | ((hv + j * nb) & 0xFFFFFFFFull);
    const EntryKey k = unkeyed_preimage(h);
    REQUIRE(unkeyed_hash(k) == h);
    if (!(k == kVictim)) attack.push_back(k);
  }
  for (const EntryKey& k : attack) REQUIRE(same_buckets(place(unkeyed_hash(k), nb), place(hv, nb)));

  Level2Table unkeyed_table({kCapacity, &unkeyed});
  CHECK(victim_after(unkeyed_table, attack, kVictim) == TableStatus::kTableFull);
  CHECK(unkeyed_table.stats().full_buckets == 1);

  std::mt19937_64 rng(31);
  for (int i = 0; i < 20; ++i) {
    Level2Table keyed({kCapacity, nullptr, TableHashKey{rng(), rng()}});
    CHECK(victim_after(keyed, attack, kVictim) == TableStatus::kOk);
    CHECK(keyed.stats().full_buckets == 0);
  }
}

TEST_CASE("keys crafted against a known secret fill a victim's buckets only under that secret") {
  const TableHashKey known{0x0123456789ABCDEFull, 0xFEDCBA9876543210ull};
  const TableHashKey other{0x5DEECE66Dull, 0xB5297A4D3F84D5B5ull};
  Level2Table probe({kCapacity});
  const uint32_t nb = probe.buckets();
  const Place victim = place(keyed_hash(known, kVictim), nb);
  // The attacker owns vNIC 9 and picks remote overlay addresses: a search,
  // since SipHash cannot be run backwards.
  std::vector<EntryKey> attack;
  for (uint32_t ip = 0x0A000000; attack.size() < 2 * Level2Table::kSlotsPerBucket; ++ip) {
    const EntryKey k = egress_key(9, ip);
    if (same_buckets(place(keyed_hash(known, k), nb), victim)) attack.push_back(k);
  }
  Level2Table under_known({kCapacity, nullptr, known});
  CHECK(victim_after(under_known, attack, kVictim) == TableStatus::kTableFull);
  Level2Table under_other({kCapacity, nullptr, other});
  CHECK(victim_after(under_other, attack, kVictim) == TableStatus::kOk);
  CHECK(under_other.stats().full_buckets == 0);
}
