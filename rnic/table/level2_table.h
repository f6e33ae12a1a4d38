// The RNIC's level-2 flow table: a fixed-capacity, versioned hash table that
// the channel worker updates in transactions and the packet path reads.
//
// Collisions are explicit: a key hashes to two buckets of eight slots (one
// cache line each); a slot holds a 32-bit tag and an entry index, and a hit
// needs the full key to compare equal, so two keys that share a bucket and a
// tag are still told apart. When neither bucket has a free slot, or the staged
// table would exceed its capacity, PUT returns kTableFull and counts it: nothing
// is evicted and no packet is ever sent with another key's entry.
//
// Versions: every entry carries [add_version, remove_version). A transaction
// stages inserts at version committed+1 (invisible to readers) and marks
// removals with remove_version = committed+1; COMMIT publishes the new version
// with one release store, so the switch is atomic and all-or-nothing, and ABORT
// unlinks the staged inserts and clears the staged removals. A reader takes a
// Snapshot at the start of a burst and uses it for every packet in the burst,
// so each packet sees exactly one version.
//
// Threads: one writer (all non-const functions), any number of readers
// (begin_read/lookup). Slots are std::atomic words published with release
// stores; an entry's key and action are written before its slot is published
// and never change while reachable. A removed entry's memory is reused only
// after two grace periods reported by the caller through reclaim(): first no
// reader may still *see* it (then it is unlinked), then no reader may still be
// *probing* a bucket that pointed to it (then it is freed). Grace periods are
// measured in epochs: the table's epoch advances on every commit and every
// unlink; readers record the epoch of their snapshot (see reader_epochs.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/channel/entry_digest.h"
#include "common/channel/huge_page_allocator.h"
#include "common/channel/messages.h"
#include "rnic/table/key_hash.h"

namespace tandem::rnic {

using common::EntryKey;
using common::Level2Entry;
using common::TableDigest;

enum class TableStatus : uint8_t {
  kOk = 0,
  kTableFull,  // capacity, both buckets, or the entry pool exhausted (see stats)
  kNoTxn,      // PUT/DEL/COMMIT/ABORT without BEGIN
  kTxnOpen,    // BEGIN while a transaction is open
  kBadEntry,   // invalid entry kind or reserved bytes set
  kBadVersion, // COMMIT to a version not above the committed one
};

struct Level2TableConfig {
  uint32_t capacity = 1024;  // max entries in any committed or staged version
  // Key hash; nullptr = the built-in one (keyed_hash with hash_key). Tests
  // pass a constant to force every key into the same two buckets and tag.
  uint64_t (*hash)(const EntryKey&) noexcept = nullptr;
  // The RNIC's secret (key_hash.h): random, drawn by the worker at start,
  // never sent to the agent or a tenant. Zeros only in tests and benchmarks.
  TableHashKey hash_key{};
};

struct Level2TableStats {
  uint64_t puts = 0;
  uint64_t dels = 0;
  uint64_t dels_absent = 0;    // DEL of a key the staged table did not hold
  uint64_t commits = 0;
  uint64_t aborts = 0;
  uint64_t full_capacity = 0;  // PUT refused: staged table already at capacity
  uint64_t full_buckets = 0;   // PUT refused: both buckets of the key are full (collisions)
  uint64_t full_pool = 0;      // PUT refused: removed entries not reclaimed yet
  uint64_t unlinked = 0;
  uint64_t freed = 0;
};

class Level2Table {
 public:
  static constexpr unsigned kSlotsPerBucket = 8;
  static constexpr uint64_t kNever = ~uint64_t{0};
  // Versions are [add, remove) with kNever as "not removed", so no committed
  // version may reach kNever: at it every entry would be invisible.
  static constexpr uint64_t kMaxVersion = kNever - 1;

  struct Snapshot {
    uint64_t epoch = 0;    // table epoch when the snapshot was taken (for reclaim)
    uint64_t version = 0;  // committed version every lookup with it sees
  };

  explicit Level2Table(const Level2TableConfig& config);
  Level2Table(const Level2Table&) = delete;
  Level2Table& operator=(const Level2Table&) = delete;

  // --- readers (any thread) ---
  Snapshot begin_read() const noexcept {
    Snapshot s;
    s.epoch = epoch_.load(std::memory_order_seq_cst);
    s.version = version_.load(std::memory_order_seq_cst);
    return s;
  }
  // The entry for key as of snap.version, or nullptr (a miss). The pointer
  // stays valid while the reader's epoch is reported active.
  const Level2Entry* lookup(const Snapshot& snap, const EntryKey& key) const noexcept;
  // Looks up n keys under one snapshot; out[i] = entry or nullptr. Returns hits.
  std::size_t lookup_burst(const Snapshot& snap, const EntryKey* keys, std::size_t n,
                           const Level2Entry** out) const noexcept;

  // --- writer (one thread) ---
  // Opens a transaction on the committed version; from_empty stages the
  // removal of every committed entry first (a full replay).
  TableStatus begin(bool from_empty = false) noexcept;
  TableStatus put(const Level2Entry& entry) noexcept;  // insert or replace
  // Writer hints for a batch of PUT/DELs: bring a key's two buckets into the
  // cache (prefetch), then, a few ops later when they have arrived, the record
  // its first tag match points to (prefetch_match), so a burst's cache misses
  // overlap instead of each op stalling on its own. No effect on the table.
  void prefetch(const EntryKey& key) const noexcept {
    uint32_t b1, b2, tag;
    buckets_of(hash(key), b1, b2, tag);
    __builtin_prefetch(&buckets_[b1]);
    __builtin_prefetch(&buckets_[b2]);
  }
  void prefetch_match(const EntryKey& key) const noexcept;
  // The two buckets `key` may occupy under this table's hash and secret
  // (the same one twice when they coincide): what tests and tandem-sim's
  // collision storm aim at. No effect on the table.
  void buckets_for(const EntryKey& key, uint32_t& b1, uint32_t& b2) const noexcept {
    uint32_t tag;
    buckets_of(hash(key), b1, b2, tag);
  }
  TableStatus del(const EntryKey& key) noexcept;       // absent key is not an error
  // Publishes the staged table as new_version (0 = committed + 1; a full
  // replay may jump ahead), visible to the next begin_read() at once.
  // kBadVersion (txn stays open) for a version below committed + 1 or above kMaxVersion.
  TableStatus commit(uint64_t new_version = 0) noexcept;
  TableStatus abort() noexcept;
  // min_active_epoch: the smallest Snapshot::epoch held by a reader inside a
  // burst, or epoch() if none is. Frees what no reader can reach any more.
  void reclaim(uint64_t min_active_epoch) noexcept;

  bool txn_open() const noexcept { return txn_open_; }
  uint64_t version() const noexcept { return version_.load(std::memory_order_relaxed); }
  uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_relaxed); }
  const TableDigest& digest() const noexcept { return committed_digest_; }   // committed
  const TableDigest& staged_digest() const noexcept { return staged_digest_; }
  uint32_t size() const noexcept { return committed_digest_.count; }
  uint32_t capacity() const noexcept { return capacity_; }
  uint32_t buckets() const noexcept { return bucket_mask_ + 1; }
  uint32_t pool_free() const noexcept { return static_cast<uint32_t>(free_.size()); }
  const Level2TableStats& stats() const noexcept { return stats_; }
  std::size_t memory_bytes() const noexcept;

  // Lets a test or the digest reconcile walk the committed table (writer thread).
  template <class F>
  void for_each_committed(F&& f) const {
    uint64_t v = version();
    for (const Record& r : pool_)
      if (meta_[&r - pool_.data()].state == RecordState::kLinked && visible(r, v)) f(r.entry);
  }

 private:
  enum class RecordState : uint8_t { kFree, kLinked, kLimbo };

  // What readers touch, on one cache line.
  struct alignas(64) Record {
    Level2Entry entry;
    uint64_t add_version = 0;                  // immutable while linked
    std::atomic<uint64_t> remove_version{kNever};
  };
  static_assert(sizeof(Record) == 64);
  // Writer-only bookkeeping, kept apart so it does not dilute the readers' lines.
  struct RecordMeta {
    uint64_t grace_epoch = 0;                  // pending unlink / limbo: epoch that must pass
    uint32_t bucket = 0;                       // where it is linked
    uint8_t slot = 0;
    RecordState state = RecordState::kFree;
  };

  struct alignas(64) Bucket {
    std::atomic<uint64_t> slot[kSlotsPerBucket];
  };

  static bool visible(const Record& r, uint64_t v) noexcept {
    return r.add_version <= v && r.remove_version.load(std::memory_order_relaxed) > v;
  }
  uint64_t hash(const EntryKey& k) const noexcept;
  void buckets_of(uint64_t h, uint32_t& b1, uint32_t& b2, uint32_t& tag) const noexcept;
  const Level2Entry* find(uint64_t h, const EntryKey& key, uint64_t v) const noexcept;
  // Writer: the record holding key in the staged view, or -1.
  int64_t find_staged(uint64_t h, const EntryKey& key) const noexcept;
  void unlink_now(uint32_t idx) noexcept;  // off the buckets, into limbo after an epoch bump
  void stage_removal(uint32_t idx) noexcept;

  uint32_t capacity_;
  uint64_t (*hash_fn_)(const EntryKey&) noexcept;  // nullptr: built-in hash
  TableHashKey hash_key_;
  uint32_t bucket_mask_ = 0;
  // Huge-page backed: lookups land at random in tables of hundreds of MiB.
  std::vector<Bucket, common::HugePageAllocator<Bucket>> buckets_;
  std::vector<Record, common::HugePageAllocator<Record>> pool_;
  std::vector<RecordMeta, common::HugePageAllocator<RecordMeta>> meta_;
  std::vector<uint32_t> free_;

  alignas(64) std::atomic<uint64_t> version_{0};
  alignas(64) std::atomic<uint64_t> epoch_{1};

  // Writer-only state.
  alignas(64) bool txn_open_ = false;
  uint64_t next_version_ = 0;
  std::vector<uint32_t> staged_inserts_;
  std::vector<uint32_t> staged_removals_;
  std::vector<uint32_t> pending_unlink_;  // removed by a commit; unlink after grace_epoch
  std::vector<uint32_t> limbo_;           // unlinked; free after grace_epoch
  TableDigest committed_digest_;
  TableDigest staged_digest_;
  Level2TableStats stats_;
};

const char* table_status_name(TableStatus s) noexcept;

}  // namespace tandem::rnic
