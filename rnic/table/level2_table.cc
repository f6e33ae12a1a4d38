// Level-2 table: lookups, staging, commit/abort and epoch-based reclamation.
#include "rnic/table/level2_table.h"

#include <algorithm>
#include <bit>

namespace tandem::rnic {

namespace {

constexpr uint64_t slot_word(uint32_t tag, uint32_t idx) noexcept {
  return (uint64_t{tag} << 32) | (uint64_t{idx} + 1);
}

bool entry_well_formed(const Level2Entry& e) noexcept {
  using common::EntryKind;
  if (e.key.kind != EntryKind::kEgress && e.key.kind != EntryKind::kIngressVni &&
      e.key.kind != EntryKind::kIngressQpn && e.key.kind != EntryKind::kVnic)
    return false;
  // A vNIC entry names its vNIC twice (key and action); they must agree.
  if (e.key.kind == EntryKind::kVnic &&
      (e.key.word1 != 0 || e.vnic.vnic_id != e.key.word0 || !common::valid_entry_pkey(e.vnic.pkey) || e.vnic.reserved2 != 0))
    return false;
  return e.key.reserved[0] == 0 && e.key.reserved[1] == 0 && e.key.reserved[2] == 0;
}

}  // namespace

const char* table_status_name(TableStatus s) noexcept {
  switch (s) {
    case TableStatus::kOk: return "ok";
    case TableStatus::kTableFull: return "table_full";
    case TableStatus::kNoTxn: return "no_txn";
    case TableStatus::kTxnOpen: return "txn_open";
    case TableStatus::kBadEntry: return "bad_entry";
    case TableStatus::kBadVersion: return "bad_version";
  }
  return "invalid";
}

Level2Table::Level2Table(const Level2TableConfig& config)
    : capacity_(std::max<uint32_t>(config.capacity, 1)),
      hash_fn_(config.hash),
      hash_key_(config.hash_key) {
  // Pool: room for a full committed table plus a full staged replacement.
  std::size_t pool = std::size_t{capacity_} * 2;
  // Buckets: linked records fill at most half the slots, so the two-choice
  // placement overflows only under real collisions.
  std::size_t nb = std::bit_ceil(std::max<std::size_t>(1, pool * 2 / kSlotsPerBucket));
  bucket_mask_ = static_cast<uint32_t>(nb - 1);
  buckets_ = decltype(buckets_)(nb);
  for (std::size_t b = 0; b < nb; ++b)
    for (auto& s : buckets_[b].slot) s.store(0, std::memory_order_relaxed);
  pool_ = decltype(pool_)(pool);
  meta_.resize(pool);
  free_.reserve(pool);
  for (std::size_t i = pool; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
  staged_inserts_.reserve(capacity_);
  staged_removals_.reserve(capacity_);
  pending_unlink_.reserve(pool);
  limbo_.reserve(pool);
}

std::size_t Level2Table::memory_bytes() const noexcept {
  return (bucket_mask_ + 1) * sizeof(Bucket) + pool_.size() * (sizeof(Record) + sizeof(RecordMeta)) +
         free_.capacity() * sizeof(uint32_t) +
         (staged_inserts_.capacity() + staged_removals_.capacity() + pending_unlink_.capacity() +
          limbo_.capacity()) * sizeof(uint32_t);
}

uint64_t Level2Table::hash(const EntryKey& k) const noexcept {
  return hash_fn_ ? hash_fn_(k) : keyed_hash(hash_key_, k);  // the default inlines: no indirect call per packet
}

void Level2Table::buckets_of(uint64_t h, uint32_t& b1, uint32_t& b2, uint32_t& tag) const noexcept {
  tag = static_cast<uint32_t>(h >> 32);
  b1 = static_cast<uint32_t>(h) & bucket_mask_;
  // Second bucket depends on the tag so keys sharing b1 spread over different b2.
  b2 = (b1 ^ static_cast<uint32_t>((uint64_t{tag} * 0x5BD1E995u) >> 7)) & bucket_mask_;
}

const Level2Entry* Level2Table::find(uint64_t h, const EntryKey& key, uint64_t v) const noexcept {
  uint32_t b[2], tag;
  buckets_of(h, b[0], b[1], tag);
  for (int i = 0; i < (b[0] == b[1] ? 1 : 2); ++i) {
    const Bucket& bk = buckets_[b[i]];
    for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
      uint64_t w = bk.slot[s].load(std::memory_order_acquire);
      if (w == 0 || static_cast<uint32_t>(w >> 32) != tag) continue;
      const Record& r = pool_[static_cast<uint32_t>(w) - 1];
      // Full-key compare: a tag match alone never decides.
      if (r.entry.key == key && visible(r, v)) return &r.entry;
    }
  }
  return nullptr;
}

const Level2Entry* Level2Table::lookup(const Snapshot& snap, const EntryKey& key) const noexcept {
  return find(hash(key), key, snap.version);
}

std::size_t Level2Table::lookup_burst(const Snapshot& snap, const EntryKey* keys, std::size_t n,
                                      const Level2Entry** out) const noexcept {
  constexpr std::size_t kChunk = 32;
  uint64_t hs[kChunk];
  std::size_t hits = 0;
  for (std::size_t base = 0; base < n; base += kChunk) {
    std::size_t m = std::min(kChunk, n - base);
    // Three passes so the cache misses of a burst overlap instead of queueing:
    // hash and prefetch both buckets; find the first tag match and prefetch
    // its record; then the real lookup, which now mostly hits the cache.
    for (std::size_t i = 0; i < m; ++i) {
      hs[i] = hash(keys[base + i]);
      uint32_t b1, b2, tag;
      buckets_of(hs[i], b1, b2, tag);
      __builtin_prefetch(&buckets_[b1]);
      __builtin_prefetch(&buckets_[b2]);
    }
    for (std::size_t i = 0; i < m; ++i) {
      uint32_t b[2], tag;
      buckets_of(hs[i], b[0], b[1], tag);
      for (uint32_t bi : b) {
        const Bucket& bk = buckets_[bi];
        for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
          uint64_t w = bk.slot[s].load(std::memory_order_relaxed);
          if (w != 0 && static_cast<uint32_t>(w >> 32) == tag) {
            __builtin_prefetch(&pool_[static_cast<uint32_t>(w) - 1]);
            goto next;
          }
        }
      }
    next:;
    }
    for (std::size_t i = 0; i < m; ++i) {
      out[base + i] = find(hs[i], keys[base + i], snap.version);
      hits += out[base + i] != nullptr;
    }
  }
  return hits;
}

int64_t Level2Table::find_staged(uint64_t h, const EntryKey& key) const noexcept {
  uint32_t b[2], tag;
  buckets_of(h, b[0], b[1], tag);
  for (int i = 0; i < (b[0] == b[1] ? 1 : 2); ++i) {
    for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
      uint64_t w = buckets_[b[i]].slot[s].load(std::memory_order_relaxed);
      if (w == 0 || static_cast<uint32_t>(w >> 32) != tag) continue;
      uint32_t idx = static_cast<uint32_t>(w) - 1;
      if (visible(pool_[idx], next_version_) && pool_[idx].entry.key == key) return idx;
    }
  }
  return -1;
}

TableStatus Level2Table::begin(bool from_empty) noexcept {
  if (txn_open_) return TableStatus::kTxnOpen;
  txn_open_ = true;
  next_version_ = version() + 1;
  staged_digest_ = committed_digest_;
  staged_inserts_.clear();
  staged_removals_.clear();
  if (from_empty) {
    uint64_t v = version();
    for (uint32_t i = 0; i < pool_.size(); ++i)
      if (meta_[i].state == RecordState::kLinked && visible(pool_[i], v)) stage_removal(i);
  }
  return TableStatus::kOk;
}

void Level2Table::stage_removal(uint32_t idx) noexcept {
  Record& r = pool_[idx];
  staged_digest_.remove(r.entry);
  if (r.add_version == next_version_) {
    // Staged in this txn and never visible to anyone: drop it now.
    unlink_now(idx);
    return;
  }
  // Readers at versions <= committed still see it (remove_version > their version).
  r.remove_version.store(next_version_, std::memory_order_relaxed);
  staged_removals_.push_back(idx);
}

void Level2Table::unlink_now(uint32_t idx) noexcept {
  RecordMeta& mt = meta_[idx];
  buckets_[mt.bucket].slot[mt.slot].store(0, std::memory_order_release);
  mt.state = RecordState::kLimbo;
  // Readers that entered before this bump may still hold the slot's old word.
  mt.grace_epoch = epoch_.fetch_add(1, std::memory_order_seq_cst) + 1;
  limbo_.push_back(idx);
  ++stats_.unlinked;
}

void Level2Table::prefetch_match(const EntryKey& key) const noexcept {
  uint32_t b[2], tag;
  buckets_of(hash(key), b[0], b[1], tag);
  for (uint32_t bi : b)
    for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
      uint64_t w = buckets_[bi].slot[s].load(std::memory_order_relaxed);
      if (w != 0 && static_cast<uint32_t>(w >> 32) == tag) {
        __builtin_prefetch(&pool_[static_cast<uint32_t>(w) - 1]);
        return;
      }
    }
}

TableStatus Level2Table::put(const Level2Entry& entry) noexcept {
  if (!txn_open_) return TableStatus::kNoTxn;
  if (!entry_well_formed(entry)) return TableStatus::kBadEntry;
  uint64_t h = hash(entry.key);
  uint32_t b[2], tag;
  buckets_of(h, b[0], b[1], tag);
  // One pass over both buckets finds the key's staged record, each bucket's
  // load and first free slot (the bucket lines are the cache misses of a PUT;
  // find_staged + has_free_slot + two load counts used to walk them 4-5 times).
  const int nb = b[0] == b[1] ? 1 : 2;
  int64_t old = -1;
  unsigned load[2] = {0, 0};
  int free_s[2] = {-1, -1};
  for (int i = 0; i < nb; ++i) {
    const Bucket& bk = buckets_[b[i]];
    for (unsigned s = 0; s < kSlotsPerBucket; ++s) {
      uint64_t w = bk.slot[s].load(std::memory_order_relaxed);
      if (w == 0) {
        if (free_s[i] < 0) free_s[i] = static_cast<int>(s);
        continue;
      }
      ++load[i];
      if (old < 0 && static_cast<uint32_t>(w >> 32) == tag) {
        uint32_t idx = static_cast<uint32_t>(w) - 1;
        if (visible(pool_[idx], next_version_) && pool_[idx].entry.key == entry.key) old = idx;
      }
    }
  }
  if (nb == 1) {
    load[1] = load[0];
    free_s[1] = free_s[0];
  }
  if (old >= 0 && pool_[old].entry == entry) {
    ++stats_.puts;  // idempotent replay of the same entry
    return TableStatus::kOk;
  }
  // Check every resource before changing anything, so a refused PUT leaves
  // the staged table as it was.
  if (old < 0 && staged_digest_.count >= capacity_) {
    ++stats_.full_capacity;
    return TableStatus::kTableFull;
  }
  if (free_.empty()) {
    ++stats_.full_pool;
    return TableStatus::kTableFull;
  }
  bool old_is_staged = old >= 0 && pool_[old].add_version == next_version_;
  if (!old_is_staged && free_s[0] < 0 && free_s[1] < 0) {
    ++stats_.full_buckets;
    return TableStatus::kTableFull;
  }
  if (old >= 0) {
    stage_removal(static_cast<uint32_t>(old));
    if (old_is_staged) {
      // Unlinked at once: its slot is free again.
      const RecordMeta& om = meta_[old];
      for (int i = 0; i < 2; ++i)
        if (b[i] == om.bucket) {
          --load[i];
          if (free_s[i] < 0 || om.slot < free_s[i]) free_s[i] = om.slot;
        }
    }
  }

  uint32_t idx = free_.back();
  free_.pop_back();
  // The next PUT's record: its line is fetched while this one is written.
  if (!free_.empty()) __builtin_prefetch(&pool_[free_.back()], 1);
  Record& r = pool_[idx];
  r.entry = entry;
  r.add_version = next_version_;
  r.remove_version.store(kNever, std::memory_order_relaxed);
  meta_[idx].state = RecordState::kLinked;
  // Two-choice placement: the emptier of the two buckets keeps both shallow.
  int i = load[1] < load[0] ? 1 : 0;
  if (free_s[i] < 0) i ^= 1;
  uint32_t bk = b[i];
  int s = free_s[i];  // the free-slot check or the unlinked old entry guarantees s >= 0
  meta_[idx].bucket = bk;
  meta_[idx].slot = static_cast<uint8_t>(s);
  // Publish: the record's fields above happen-before any reader that sees this word.
  buckets_[bk].slot[s].store(slot_word(tag, idx), std::memory_order_release);
  staged_inserts_.push_back(idx);
  staged_digest_.add(entry);
  ++stats_.puts;
  return TableStatus::kOk;
}

TableStatus Level2Table::del(const EntryKey& key) noexcept {
  if (!txn_open_) return TableStatus::kNoTxn;
  int64_t old = find_staged(hash(key), key);
  ++stats_.dels;
  if (old < 0) {
    ++stats_.dels_absent;
    return TableStatus::kOk;
  }
  stage_removal(static_cast<uint32_t>(old));
  return TableStatus::kOk;
}

TableStatus Level2Table::commit(uint64_t new_version) noexcept {
  if (!txn_open_) return TableStatus::kNoTxn;
  if (new_version == 0) new_version = next_version_;
  // Staged inserts carry add_version = next_version_ and removals
  // remove_version = next_version_, so any version >= next_version_ shows
  // exactly the staged table; a smaller one would expose nothing new.
  if (new_version < next_version_ || new_version > kMaxVersion) return TableStatus::kBadVersion;
  // The single switch: readers that load the new version see every staged
  // insert (published before) and every staged removal.
  version_.store(new_version, std::memory_order_seq_cst);
  uint64_t e = epoch_.fetch_add(1, std::memory_order_seq_cst) + 1;
  for (uint32_t idx : staged_removals_) {
    meta_[idx].grace_epoch = e;  // once every reader is at epoch >= e, none can see it
    pending_unlink_.push_back(idx);
  }
  committed_digest_ = staged_digest_;
  staged_inserts_.clear();
  staged_removals_.clear();
  txn_open_ = false;
  ++stats_.commits;
  return TableStatus::kOk;
}

TableStatus Level2Table::abort() noexcept {
  if (!txn_open_) return TableStatus::kNoTxn;
  for (uint32_t idx : staged_inserts_)
    if (meta_[idx].state == RecordState::kLinked && pool_[idx].add_version == next_version_)
      unlink_now(idx);
  for (uint32_t idx : staged_removals_)
    pool_[idx].remove_version.store(kNever, std::memory_order_relaxed);
  staged_inserts_.clear();
  staged_removals_.clear();
  staged_digest_ = committed_digest_;
  txn_open_ = false;
  ++stats_.aborts;
  return TableStatus::kOk;
}

void Level2Table::reclaim(uint64_t min_active_epoch) noexcept {
  // Free what was unlinked long enough ago that no reader can be probing it.
  std::size_t keep = 0;
  for (uint32_t idx : limbo_) {
    if (meta_[idx].grace_epoch <= min_active_epoch) {
      meta_[idx].state = RecordState::kFree;
      free_.push_back(idx);
      ++stats_.freed;
    } else {
      limbo_[keep++] = idx;
    }
  }
  limbo_.resize(keep);
  // Unlink removed entries no reader can see; they are freed by a later call.
  keep = 0;
  std::vector<uint32_t>& pend = pending_unlink_;
  std::size_t n = pend.size();
  for (std::size_t i = 0; i < n; ++i) {
    uint32_t idx = pend[i];
    if (meta_[idx].grace_epoch <= min_active_epoch)
      unlink_now(idx);
    else
      pend[keep++] = idx;
  }
  pend.resize(keep);
}

}  // namespace tandem::rnic
