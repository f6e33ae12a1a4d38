#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "rnic/table/level2_table.h"
#include "rnic/table/reader_epochs.h"

using namespace tandem::rnic;
using tandem::common::EgressAction;
using tandem::common::IngressAction;
using tandem::common::egress_key;
using tandem::common::ingress_key_vni;
using tandem::common::make_egress_entry;
using tandem::common::make_ingress_entry;

namespace {

Level2Entry egress(uint32_t vnic, uint32_t ip, uint32_t dst, uint32_t vni = 100) {
  EgressAction a;
  a.underlay_src_ip = 0x0A000001;
  a.underlay_dst_ip = dst;
  a.vni = vni;
  return make_egress_entry(egress_key(vnic, ip), a);
}

uint64_t constant_hash(const EntryKey&) noexcept { return 0x1234567800000005ull; }

void commit_all(Level2Table& t, const std::vector<Level2Entry>& es) {
  REQUIRE(t.begin() == TableStatus::kOk);
  for (auto& e : es) REQUIRE(t.put(e) == TableStatus::kOk);
  REQUIRE(t.commit() == TableStatus::kOk);
}

uint32_t dst_of(const Level2Entry* e) { return e ? e->egress.underlay_dst_ip : 0; }

}  // namespace

TEST_CASE("staged entries are invisible until commit, then all visible") {
  Level2Table t({64});
  REQUIRE(t.begin() == TableStatus::kOk);
  REQUIRE(t.put(egress(1, 10, 100)) == TableStatus::kOk);
  REQUIRE(t.put(egress(1, 11, 101)) == TableStatus::kOk);
  CHECK(t.lookup(t.begin_read(), egress_key(1, 10)) == nullptr);
  REQUIRE(t.commit() == TableStatus::kOk);
  auto s = t.begin_read();
  CHECK(s.version == 1);
  CHECK(dst_of(t.lookup(s, egress_key(1, 10))) == 100);
  CHECK(dst_of(t.lookup(s, egress_key(1, 11))) == 101);
  CHECK(t.lookup(s, egress_key(2, 10)) == nullptr);
  CHECK(t.size() == 2);
}

TEST_CASE("keys sharing bucket and tag are told apart by the full key") {
  Level2Table t({64, &constant_hash});
  std::vector<Level2Entry> es;
  for (uint32_t i = 0; i < Level2Table::kSlotsPerBucket; ++i) es.push_back(egress(1, 1000 + i, 500 + i));
  commit_all(t, es);
  auto s = t.begin_read();
  for (uint32_t i = 0; i < Level2Table::kSlotsPerBucket; ++i)
    CHECK(dst_of(t.lookup(s, egress_key(1, 1000 + i))) == 500 + i);
  // Same hash, not inserted: a miss, never someone else's entry.
  CHECK(t.lookup(s, egress_key(1, 999)) == nullptr);
  CHECK(t.lookup(s, ingress_key_vni(1, 1000)) == nullptr);
}

TEST_CASE("a put into full buckets is refused and counted, nothing is evicted") {
  // Every key has the same hash: same two buckets, same tag.
  Level2Table t({64, &constant_hash});
  REQUIRE(t.begin() == TableStatus::kOk);
  uint32_t fitted = 0;
  while (t.put(egress(1, 1000 + fitted, 500 + fitted)) == TableStatus::kOk) ++fitted;
  CHECK(fitted >= Level2Table::kSlotsPerBucket);
  CHECK(fitted <= 2 * Level2Table::kSlotsPerBucket);
  CHECK(t.stats().full_buckets == 1);
  REQUIRE(t.commit() == TableStatus::kOk);
  auto s = t.begin_read();
  CHECK(t.size() == fitted);
  CHECK(t.lookup(s, egress_key(1, 1000 + fitted)) == nullptr);
  for (uint32_t i = 0; i < fitted; ++i) CHECK(dst_of(t.lookup(s, egress_key(1, 1000 + i))) == 500 + i);
}

TEST_CASE("capacity overflow is reported but replacing an existing key still works") {
  Level2Table t({4});
  REQUIRE(t.begin() == TableStatus::kOk);
  for (uint32_t i = 0; i < 4; ++i) REQUIRE(t.put(egress(1, i, i)) == TableStatus::kOk);
  CHECK(t.put(egress(1, 99, 99)) == TableStatus::kTableFull);
  CHECK(t.stats().full_capacity == 1);
  CHECK(t.put(egress(1, 2, 77)) == TableStatus::kOk);  // replace, count unchanged
  REQUIRE(t.commit() == TableStatus::kOk);
  CHECK(t.size() == 4);
  CHECK(dst_of(t.lookup(t.begin_read(), egress_key(1, 2))) == 77);
}

TEST_CASE("abort discards every staged put and delete") {
  Level2Table t({64});
  commit_all(t, {egress(1, 1, 11), egress(1, 2, 12)});
  auto before = t.digest();
  REQUIRE(t.begin() == TableStatus::kOk);
  REQUIRE(t.put(egress(1, 3, 13)) == TableStatus::kOk);
  REQUIRE(t.put(egress(1, 1, 99)) == TableStatus::kOk);
  REQUIRE(t.del(egress_key(1, 2)) == TableStatus::kOk);
  REQUIRE(t.abort() == TableStatus::kOk);
  auto s = t.begin_read();
  CHECK(s.version == 1);
  CHECK(dst_of(t.lookup(s, egress_key(1, 1))) == 11);
  CHECK(dst_of(t.lookup(s, egress_key(1, 2))) == 12);
  CHECK(t.lookup(s, egress_key(1, 3)) == nullptr);
  CHECK(t.digest() == before);
  // The next transaction starts from the committed table, not the aborted one.
  REQUIRE(t.begin() == TableStatus::kOk);
  REQUIRE(t.del(egress_key(1, 1)) == TableStatus::kOk);
  REQUIRE(t.commit() == TableStatus::kOk);
  s = t.begin_read();
  CHECK(s.version == 2);
  CHECK(t.lookup(s, egress_key(1, 1)) == nullptr);
  CHECK(dst_of(t.lookup(s, egress_key(1, 2))) == 12);
}

TEST_CASE("transaction state errors are statuses, not crashes") {
  Level2Table t({8});
  CHECK(t.put(egress(1, 1, 1)) == TableStatus::kNoTxn);
  CHECK(t.commit() == TableStatus::kNoTxn);
  REQUIRE(t.begin() == TableStatus::kOk);
  CHECK(t.begin() == TableStatus::kTxnOpen);
  Level2Entry bad = egress(1, 1, 1);
  bad.key.kind = tandem::common::EntryKind::kInvalid;
  CHECK(t.put(bad) == TableStatus::kBadEntry);
  CHECK(t.del(egress_key(5, 5)) == TableStatus::kOk);
  CHECK(t.stats().dels_absent == 1);
}

TEST_CASE("no commit reaches version kNever, where no entry would be visible") {
  Level2Table t({8});
  REQUIRE(t.begin() == TableStatus::kOk);
  REQUIRE(t.put(egress(1, 1, 7)) == TableStatus::kOk);
  CHECK(t.commit(Level2Table::kNever) == TableStatus::kBadVersion);
  CHECK(t.txn_open());  // refused, not applied: the caller aborts
  REQUIRE(t.commit(Level2Table::kMaxVersion) == TableStatus::kOk);
  CHECK(dst_of(t.lookup(t.begin_read(), egress_key(1, 1))) == 7);
  REQUIRE(t.begin() == TableStatus::kOk);
  CHECK(t.commit() == TableStatus::kBadVersion);  // committed + 1 would be kNever
  REQUIRE(t.abort() == TableStatus::kOk);
  CHECK(t.size() == 1);
}

TEST_CASE("a reader holding the old version keeps seeing it after commits") {
  Level2Table t({64});
  commit_all(t, {egress(1, 1, 11), egress(1, 2, 12)});
  ReaderEpochs readers(1);
  auto old = readers.enter(0, t);

  REQUIRE(t.begin() == TableStatus::kOk);
  REQUIRE(t.put(egress(1, 1, 21)) == TableStatus::kOk);
  REQUIRE(t.del(egress_key(1, 2)) == TableStatus::kOk);
  REQUIRE(t.commit() == TableStatus::kOk);
  // Reclaim as the writer would while the reader is still inside its burst.
  t.reclaim(readers.min_active(t));
  t.reclaim(readers.min_active(t));
  CHECK(t.stats().unlinked == 0);

  CHECK(dst_of(t.lookup(old, egress_key(1, 1))) == 11);
  CHECK(dst_of(t.lookup(old, egress_key(1, 2))) == 12);
  auto now = t.begin_read();
  CHECK(dst_of(t.lookup(now, egress_key(1, 1))) == 21);
  CHECK(t.lookup(now, egress_key(1, 2)) == nullptr);

  readers.exit(0);
  t.reclaim(readers.min_active(t));  // unlinks the two removed entries
  CHECK(t.stats().unlinked == 2);
  CHECK(t.stats().freed == 0);
  t.reclaim(readers.min_active(t));  // one more grace period frees them
  CHECK(t.stats().freed == 2);
}

TEST_CASE("removed entries are not reused until reclaim says no reader can reach them") {
  Level2Table t({2});  // pool of 4 records
  commit_all(t, {egress(1, 1, 1), egress(1, 2, 2)});
  commit_all(t, {egress(1, 1, 3), egress(1, 2, 4)});  // old two now awaiting grace
  REQUIRE(t.begin() == TableStatus::kOk);
  CHECK(t.put(egress(1, 1, 5)) == TableStatus::kTableFull);
  CHECK(t.stats().full_pool == 1);
  REQUIRE(t.abort() == TableStatus::kOk);
  t.reclaim(t.epoch());
  t.reclaim(t.epoch());
  CHECK(t.pool_free() == 2);
  commit_all(t, {egress(1, 1, 5)});
  CHECK(dst_of(t.lookup(t.begin_read(), egress_key(1, 1))) == 5);
}

TEST_CASE("full replay from empty reproduces the digest of incremental history") {
  Level2Table a({512});
  std::mt19937 rng(7);
  std::vector<uint32_t> keys;
  for (int txn = 0; txn < 40; ++txn) {
    REQUIRE(a.begin() == TableStatus::kOk);
    for (int op = 0; op < 10; ++op) {
      uint32_t ip = rng() % 200;
      if (rng() % 4 == 0)
        REQUIRE(a.del(egress_key(1, ip)) == TableStatus::kOk);
      else
        REQUIRE(a.put(egress(1, ip, rng())) == TableStatus::kOk);
    }
    if (txn % 7 == 3)
      REQUIRE(a.abort() == TableStatus::kOk);
    else
      REQUIRE(a.commit() == TableStatus::kOk);
    a.reclaim(a.epoch());
  }
  std::vector<Level2Entry> live;
  a.for_each_committed([&](const Level2Entry& e) { live.push_back(e); });
  REQUIRE(live.size() == a.size());
  TableDigest independent;
  for (auto& e : live) independent.add(e);
  CHECK(independent == a.digest());

  // Another table with different history, then a full replay in another order.
  Level2Table b({512});
  commit_all(b, {egress(9, 9, 9), egress(8, 8, 8)});
  std::shuffle(live.begin(), live.end(), rng);
  REQUIRE(b.begin(/*from_empty=*/true) == TableStatus::kOk);
  for (auto& e : live) REQUIRE(b.put(e) == TableStatus::kOk);
  REQUIRE(b.commit() == TableStatus::kOk);
  CHECK(b.digest() == a.digest());
  CHECK(b.lookup(b.begin_read(), egress_key(9, 9)) == nullptr);
}

TEST_CASE("ingress and egress entries coexist under the same words") {
  Level2Table t({16});
  IngressAction in;
  in.overlay_src_ip = 0xC0A80002;
  in.local_vnic_id = 4;
  commit_all(t, {egress(7, 5, 55), make_ingress_entry(ingress_key_vni(7, 5), in)});
  auto s = t.begin_read();
  CHECK(dst_of(t.lookup(s, egress_key(7, 5))) == 55);
  auto* e = t.lookup(s, ingress_key_vni(7, 5));
  REQUIRE(e != nullptr);
  CHECK(e->ingress.local_vnic_id == 4);
}

TEST_CASE("burst lookups under one snapshot see one version while a writer commits") {
  constexpr uint32_t kKeys = 64;
  constexpr uint64_t kTxns = 300;
  Level2Table t({kKeys});
  ReaderEpochs readers(1);
  std::vector<Level2Entry> first;
  for (uint32_t i = 0; i < kKeys; ++i) first.push_back(egress(1, i, 1000 + i, /*vni=*/1));
  commit_all(t, first);

  std::atomic<bool> done{false};
  std::atomic<uint64_t> bad{0}, bursts{0};
  std::thread reader([&] {
    std::vector<EntryKey> keys;
    for (uint32_t i = 0; i < kKeys; ++i) keys.push_back(egress_key(1, i));
    std::vector<const Level2Entry*> out(kKeys);
    while (!done.load(std::memory_order_acquire)) {
      auto snap = readers.enter(0, t);
      std::size_t hits = t.lookup_burst(snap, keys.data(), kKeys, out.data());
      if (hits != kKeys) ++bad;
      for (uint32_t i = 0; i < kKeys; ++i)
        if (out[i] && (out[i]->egress.vni != snap.version || out[i]->key.word1 != i)) ++bad;
      readers.exit(0);
      ++bursts;
    }
  });
  for (uint64_t v = 2; v <= kTxns; ++v) {
    REQUIRE(t.begin() == TableStatus::kOk);
    for (uint32_t i = 0; i < kKeys; ++i)
      REQUIRE(t.put(egress(1, i, 1000 + i, static_cast<uint32_t>(v))) == TableStatus::kOk);
    REQUIRE(t.commit() == TableStatus::kOk);
    // Recycle what the reader cannot reach; let it progress when pool runs low.
    do {
      t.reclaim(readers.min_active(t));
      if (t.pool_free() < kKeys) std::this_thread::yield();
    } while (t.pool_free() < kKeys);
  }
  while (bursts.load() < 10) std::this_thread::yield();
  done.store(true, std::memory_order_release);
  reader.join();
  CHECK(bad.load() == 0);
  CHECK(t.version() == kTxns);
}

TEST_CASE("replacing a key staged in the same txn reuses its slot, even with both buckets full") {
  Level2Table t({64, &constant_hash});
  REQUIRE(t.begin() == TableStatus::kOk);
  uint32_t fitted = 0;
  while (t.put(egress(1, 1000 + fitted, 500 + fitted)) == TableStatus::kOk) ++fitted;
  REQUIRE(t.stats().full_buckets == 1);
  // Every slot of both buckets is taken; rewriting a staged key must still fit.
  for (uint32_t round = 0; round < 3; ++round)
    for (uint32_t i = 0; i < fitted; ++i) REQUIRE(t.put(egress(1, 1000 + i, 7000 + round * 100 + i)) == TableStatus::kOk);
  CHECK(t.stats().full_buckets == 1);
  REQUIRE(t.commit() == TableStatus::kOk);
  auto s = t.begin_read();
  CHECK(t.size() == fitted);
  for (uint32_t i = 0; i < fitted; ++i) CHECK(dst_of(t.lookup(s, egress_key(1, 1000 + i))) == 7200 + i);
}

TEST_CASE("random put/del/commit/abort histories match a reference map") {
  // Two hash functions: the built-in one, and one folding keys onto a few
  // bucket pairs so full buckets, replacements and slot reuse happen often.
  static auto few_buckets = [](const EntryKey& k) noexcept -> uint64_t {
    uint64_t x = (k.word1 % 5) * 0x9E3779B97F4A7C15ull;
    return (x & 0xFFFFFFFF00000000ull) | (k.word1 % 3);
  };
  for (uint64_t (*h)(const EntryKey&) noexcept : {static_cast<uint64_t (*)(const EntryKey&) noexcept>(nullptr),
                                                  +few_buckets}) {
    Level2Table t({48, h});
    std::mt19937 rng(h ? 7 : 8);
    std::vector<uint32_t> committed(64, 0), staged;  // key word1 -> dst (0 = absent)
    uint64_t refused = 0;
    for (int txn = 0; txn < 3000; ++txn) {
      REQUIRE(t.begin() == TableStatus::kOk);
      staged = committed;
      bool ok = true;
      for (int op = 0, n = 1 + rng() % 12; op < n && ok; ++op) {
        uint32_t k = rng() % 64;
        if (rng() % 3 == 0) {
          REQUIRE(t.del(egress_key(1, k)) == TableStatus::kOk);
          staged[k] = 0;
        } else {
          uint32_t dst = 1 + rng() % 4;  // few values: same-entry rewrites happen too
          TableStatus st = t.put(egress(1, k, dst));
          if (st == TableStatus::kTableFull) {
            ++refused;
            ok = false;  // a refused txn is aborted by the channel
          } else {
            REQUIRE(st == TableStatus::kOk);
            staged[k] = dst;
          }
        }
        TableDigest d;
        for (uint32_t i = 0; i < 64; ++i)
          if (staged[i]) d.add(egress(1, i, staged[i]));
        REQUIRE(d == t.staged_digest());
      }
      if (ok && rng() % 5) {
        REQUIRE(t.commit() == TableStatus::kOk);
        committed = staged;
      } else {
        REQUIRE(t.abort() == TableStatus::kOk);
      }
      t.reclaim(t.epoch());
      auto s = t.begin_read();
      for (uint32_t i = 0; i < 64; ++i) REQUIRE(dst_of(t.lookup(s, egress_key(1, i))) == committed[i]);
    }
    CHECK(refused > 0);  // the capacity (and, folded, the buckets) did run out
    TableDigest recomputed;
    t.for_each_committed([&](const Level2Entry& e) { recomputed.add(e); });
    CHECK(recomputed == t.digest());
  }
}
