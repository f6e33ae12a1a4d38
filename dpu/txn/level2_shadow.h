// The agent's copy of what one RNIC has committed: entries, version, digest.
// Updated only when COMMITTED arrives, so it is what the RNIC really holds,
// and compared with the RNIC's BAR/HELLO_ACK digest to skip a full replay.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "common/channel/entry_digest.h"
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

class Level2Shadow {
 public:
  using Map = std::unordered_map<common::EntryKey, common::Level2Entry, EntryKeyHash>;

  uint64_t version() const noexcept { return version_; }
  const common::TableDigest& digest() const noexcept { return digest_; }
  const Map& entries() const noexcept { return entries_; }
  const common::Level2Entry* find(const common::EntryKey& k) const {
    auto it = entries_.find(k);
    return it == entries_.end() ? nullptr : &it->second;
  }

  // Digest and count the table would have after ops, without changing anything.
  common::TableDigest digest_after(const std::vector<Level2Op>& ops) const;
  // Applies committed ops; returns the net effect (final puts, deleted keys) for the store.
  void apply(const std::vector<Level2Op>& ops, uint64_t new_version,
             std::vector<common::Level2Entry>* net_puts = nullptr,
             std::vector<common::EntryKey>* net_dels = nullptr);
  // Replaces everything (agent start from the store, or after a full replay).
  void reset(uint64_t version, const std::vector<common::Level2Entry>& entries);
  void set_version(uint64_t v) noexcept { version_ = v; }
  std::vector<common::Level2Entry> snapshot() const;

 private:
  Map entries_;
  common::TableDigest digest_;
  uint64_t version_ = 0;
};

}  // namespace tandem::dpu
