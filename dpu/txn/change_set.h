// An ordered list of level-2 operations for one RNIC: what one punt resolution,
// one level-1 change or one operator command needs installed or removed.
#pragma once

#include <cstdint>
#include <vector>

#include "common/channel/messages.h"

namespace tandem::dpu {

struct Level2Op {
  bool del = false;          // true: delete entry.key; false: put entry
  common::Level2Entry entry;
};

struct ChangeSet {
  uint64_t tag = 0;          // caller's id, reported back in the outcome
  // The tenant whose resolution this is (0: the agent's own change): a
  // transaction the RNIC refuses is split per owner first (agent_channel.h).
  uint32_t owner = 0;
  std::vector<Level2Op> ops;

  void put(const common::Level2Entry& e) { ops.push_back({false, e}); }
  void del(const common::EntryKey& k) {
    Level2Op op;
    op.del = true;
    op.entry.key = k;
    ops.push_back(op);
  }
};

}  // namespace tandem::dpu
