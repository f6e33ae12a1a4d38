// The agent's copy of what one RNIC has committed: entries, version, digest.
// Updated only when COMMITTED arrives, so it is what the RNIC really holds,
// and compared with the RNIC's BAR/HELLO_ACK digest to skip a full replay.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/channel/entry_digest.h"
#include "common/channel/huge_page_allocator.h"
#include "common/channel/messages.h"
#include "dpu/txn/change_set.h"

namespace tandem::dpu {

struct EntryKeyHash {
  std::size_t operator()(const common::EntryKey& k) const noexcept {
    uint64_t x = (uint64_t{k.word0} << 32 | k.word1) ^ (uint64_t{static_cast<uint8_t>(k.kind)} << 61);
    x *= 0x9E3779B97F4A7C15ull;
    return static_cast<std::size_t>(x ^ (x >> 29));
  }
};

// EntryKey -> Level2Entry in one flat array (open addressing, linear probing,
// backward-shift deletion, load <= 3/4): one probe sequence over contiguous
// slots per lookup instead of a node per entry, since the new-flow path does a
// shadow lookup per op when building a txn and again when applying it.
// Iterates (first = key, second = entry) like the std::unordered_map it
// replaces; a slot whose key kind is kInvalid is empty, so entries of kind
// kInvalid (which no RNIC accepts) are never stored.
class EntryMap {
 public:
  using value_type = std::pair<common::EntryKey, common::Level2Entry>;

  class const_iterator {
   public:
    const_iterator(const value_type* p, const value_type* end) noexcept : p_(p), end_(end) { skip(); }
    const value_type& operator*() const noexcept { return *p_; }
    const value_type* operator->() const noexcept { return p_; }
    const_iterator& operator++() noexcept {
      ++p_;
      skip();
      return *this;
    }
    friend bool operator==(const const_iterator& a, const const_iterator& b) noexcept { return a.p_ == b.p_; }

   private:
    void skip() noexcept {
      while (p_ != end_ && p_->first.kind == common::EntryKind::kInvalid) ++p_;
    }
    const value_type* p_;
    const value_type* end_;
  };

  EntryMap() noexcept = default;
  EntryMap(const EntryMap& o);
  EntryMap(EntryMap&& o) noexcept { swap(o); }
  EntryMap& operator=(EntryMap o) noexcept {
    swap(o);
    return *this;
  }
  ~EntryMap();
  void swap(EntryMap& o) noexcept;

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t slot_count() const noexcept { return n_slots_; }
  const_iterator begin() const noexcept { return {slots_, slots_ + n_slots_}; }
  const_iterator end() const noexcept { return {slots_ + n_slots_, slots_ + n_slots_}; }

  const common::Level2Entry* find(const common::EntryKey& k) const noexcept;
  // Brings k's home slot into the cache ahead of a find/insert/erase (a slot
  // is 48 bytes, so it may span two lines). No effect on the map.
  void prefetch(const common::EntryKey& k) const noexcept {
    if (n_slots_ == 0) return;
    const char* p = reinterpret_cast<const char*>(&slots_[home(k)]);
    __builtin_prefetch(p);
    __builtin_prefetch(p + sizeof(value_type) - 1);
  }
  // Reads k's home slot (both lines it may span) and returns a byte of it,
  // for a caller warming many slots at once: independent loads in a tight
  // loop overlap their misses. Measured on the new-flow path, the finds after
  // a software prefetch of the same slots still missed (a third of the
  // agent's CPU per flow), after these loads they hit.
  uint8_t touch(const common::EntryKey& k) const noexcept {
    if (n_slots_ == 0) return 0;
    const volatile uint8_t* p = reinterpret_cast<const volatile uint8_t*>(&slots_[home(k)]);
    return static_cast<uint8_t>(p[0] ^ p[sizeof(value_type) - 1]);
  }
  // The entry stored under k, inserted default-constructed (key set) if absent.
  std::pair<common::Level2Entry*, bool> find_or_insert(const common::EntryKey& k);
  bool erase(const common::EntryKey& k) noexcept;
  void clear() noexcept;
  // Room for n entries without growing. With populate, the pages are also
  // faulted in now (zeroed by the kernel) rather than by the inserts that
  // first touch them: see Level2Shadow::presize.
  void reserve(std::size_t n, bool populate = false);

 private:
  std::size_t home(const common::EntryKey& k) const noexcept {
    return static_cast<std::size_t>((EntryKeyHash{}(k) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void rehash(std::size_t slots, bool populate = false);

  // An empty slot is all-zero bytes (key kind kInvalid), so fresh zero-filled
  // memory is an empty table as it comes from the kernel: growing needs no
  // pass writing empty slots over pages the kernel has just zeroed.
  value_type* slots_ = nullptr;  // n_slots_ slots; large blocks on huge pages
  std::size_t n_slots_ = 0;
  std::size_t size_ = 0;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
};

class Level2Shadow {
 public:
  using Map = EntryMap;

  uint64_t version() const noexcept { return version_; }
  const common::TableDigest& digest() const noexcept { return digest_; }
  const Map& entries() const noexcept { return entries_; }
  const common::Level2Entry* find(const common::EntryKey& k) const noexcept { return entries_.find(k); }
  void prefetch(const common::EntryKey& k) const noexcept { entries_.prefetch(k); }
  // Loads the slots of keys[0..n) now (EntryMap::touch), so the finds that
  // follow hit the cache.
  void touch(const common::EntryKey* keys, std::size_t n) const noexcept {
    uint8_t sink = 0;
    for (std::size_t i = 0; i < n; ++i) sink ^= entries_.touch(keys[i]);
    asm volatile("" : : "r"(sink));
  }

  // Digest and count the table would have after ops, without changing anything.
  common::TableDigest digest_after(const std::vector<Level2Op>& ops) const;
  // The same on top of `earlier`, the ops of a txn sent but not committed yet
  // whose expected digest is after_earlier: what the table holds once both
  // have committed (for a txn pipelined behind another).
  common::TableDigest digest_after(const std::vector<Level2Op>& ops, const std::vector<Level2Op>& earlier,
                                   const common::TableDigest& after_earlier) const;
  // Applies committed ops; returns the net effect (final puts, deleted keys) for the store.
  void apply(const std::vector<Level2Op>& ops, uint64_t new_version,
             std::vector<common::Level2Entry>* net_puts = nullptr,
             std::vector<common::EntryKey>* net_dels = nullptr);
  // Replaces everything (agent start from the store, or after a full replay).
  void reset(uint64_t version, const std::vector<common::Level2Entry>& entries);
  void set_version(uint64_t v) noexcept { version_ = v; }
  // Drops every entry of `kind` (version kept); returns how many. For an RNIC
  // that negotiated a protocol without that kind: it cannot hold them, and the
  // shadow must stay what it holds.
  std::size_t forget(common::EntryKind kind);
  std::vector<common::Level2Entry> snapshot() const;
  // Egress entries (flows) of local vNIC `vnic`: what a tenant's quota counts.
  uint32_t egress_of_vnic(uint32_t vnic) const noexcept {
    auto it = egress_by_vnic_.find(vnic);
    return it == egress_by_vnic_.end() ? 0 : static_cast<uint32_t>(it->second);
  }
  // Sizes the shadow for what the RNIC can hold (its HELLO_ACK table
  // capacity, at most kPresizeLimit) and faults the memory in now: the shadow
  // mirrors a fixed-capacity table, and growing it by doubling while new flows
  // arrive cost a third of the agent's CPU per new flow (rehash copies plus
  // the kernel zeroing fresh pages); the worker pays for its own table the
  // same way, once, at start. Memory: about 64 bytes per entry of capacity.
  // Capped at kPresizeLimit entries (~400 MiB, ~0.1 s of page faults in the
  // agent's loop): a larger table's shadow grows beyond that as it fills.
  void presize(uint32_t capacity);
  static constexpr uint32_t kPresizeLimit = 1u << 22;

 private:
  common::TableDigest digest_after(const std::vector<Level2Op>& ops, const std::vector<Level2Op>* earlier,
                                   common::TableDigest from) const;

  void count(const common::EntryKey& k, int d);

  Map entries_;
  std::unordered_map<uint32_t, int64_t> egress_by_vnic_;  // egress key word0 -> entries
  common::TableDigest digest_;
  uint64_t version_ = 0;
};

}  // namespace tandem::dpu
