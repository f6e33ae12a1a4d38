// Turns level-2 change sets into channel message sequences:
//   incremental: BEGIN(txn, base) PUT/DEL ... COMMIT(txn, base+1, digest, count)
//   full replay: SYNC_START(txn) PUT ... SYNC_END(txn, version, digest, count)
// Versions only ever increase; the digest and count are what the RNIC must
// hold after the commit (it aborts on mismatch from protocol v2 on).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "common/channel/entry_digest.h"
#include "common/channel/messages.h"
#include "dpu/txn/change_set.h"
#include "dpu/txn/level2_shadow.h"

namespace tandem::dpu {

// One of several change sets merged into a txn: its owner and where its ops
// end, kept to split the txn if the RNIC refuses it.
struct MergedSet {
  uint32_t owner = 0;
  uint32_t end = 0;
};

// A transaction sent and not yet answered.
struct PendingTxn {
  uint32_t txn = 0;
  bool replay = false;                 // full replay (SYNC_START..SYNC_END)
  uint64_t base_version = 0;
  uint64_t version = 0;                // version the RNIC must report in COMMITTED
  common::TableDigest expected;        // digest/count the RNIC must report
  std::vector<Level2Op> ops;           // incremental ops (empty for a replay)
  std::vector<uint64_t> tags;          // change sets merged into this txn
  std::vector<MergedSet> sets;         // several: each one's owner and end (empty with one)
  uint32_t owner = 0;                  // one: its owner
  bool alone = false;                  // a piece of a refused txn: merged with nothing else
};

class TxnBuilder {
 public:
  // Appends the messages (seq left 0: the channel stamps them) to out.
  static PendingTxn build(const Level2Shadow& shadow, uint32_t txn, std::vector<Level2Op> ops,
                          std::deque<common::RawMessage>& out);
  // The same for a txn pipelined behind `before` (sent, not committed yet):
  // based on before's version, its digest computed on top of before's ops.
  static PendingTxn build_after(const Level2Shadow& shadow, const PendingTxn& before, uint32_t txn,
                                std::vector<Level2Op> ops, std::deque<common::RawMessage>& out);
  // Replays the whole shadow as version new_version (> anything the RNIC has).
  static PendingTxn build_replay(const Level2Shadow& shadow, uint32_t txn, uint64_t new_version,
                                 std::deque<common::RawMessage>& out);
};

}  // namespace tandem::dpu
