// The vNICs of an RNIC port as its committed level-2 table holds them (the v3
// vNIC entries), kept by the channel end next to the table's transactions so
// the worker never scans the table for them: PUT/DEL of vNIC entries are
// staged with the transaction, COMMIT publishes them together with the table
// version, ABORT drops them. Single-threaded (the channel's thread); a handful
// of entries, so a flat vector; it changes on commits only, never per packet.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/channel/messages.h"

namespace tandem::rnic {

class VnicList {
 public:
  // A transaction opens: staged starts from the committed list, or empty for
  // a full replay (SYNC_START stages the removal of everything).
  void begin(bool from_empty) {
    staged_ = from_empty ? std::vector<common::VnicAction>{} : committed_;
  }
  // Called only for PUT/DELs the table accepted.
  void put(const common::VnicAction& v) {
    for (common::VnicAction& x : staged_)
      if (x.vnic_id == v.vnic_id) {
        x = v;
        return;
      }
    staged_.push_back(v);
  }
  void del(uint32_t vnic_id) {
    std::erase_if(staged_, [&](const common::VnicAction& x) { return x.vnic_id == vnic_id; });
  }
  void commit(uint64_t version) {
    if (staged_ != committed_) ++generation_;
    committed_.swap(staged_);
    version_ = version;
  }
  void abort() { staged_.clear(); }

  // The vNIC entries of the committed table, in the order they were put.
  const std::vector<common::VnicAction>& committed() const noexcept { return committed_; }
  // Table version committed() belongs to.
  uint64_t version() const noexcept { return version_; }
  // Changes whenever committed() does (starts at 0): a consumer keeps a copy
  // and refreshes it when this moves.
  uint64_t generation() const noexcept { return generation_; }
  const common::VnicAction* find(uint32_t vnic_id) const noexcept {
    for (const common::VnicAction& x : committed_)
      if (x.vnic_id == vnic_id) return &x;
    return nullptr;
  }

 private:
  std::vector<common::VnicAction> committed_;
  std::vector<common::VnicAction> staged_;
  uint64_t version_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace tandem::rnic
