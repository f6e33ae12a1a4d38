// Message sequences for incremental transactions and full replays.
#include "dpu/txn/txn_builder.h"

namespace tandem::dpu {

using namespace tandem::common;

namespace {
RawMessage op_message(uint32_t txn, const Level2Op& op) {
  if (op.del) {
    DelMsg d;
    d.txn = txn;
    d.key = op.entry.key;
    return to_raw(d);
  }
  PutMsg p;
  p.txn = txn;
  p.entry = op.entry;
  return to_raw(p);
}

// BEGIN, the ops, COMMIT with p's version and expected digest.
PendingTxn emit(PendingTxn p, std::vector<Level2Op> ops, std::deque<RawMessage>& out) {
  const uint32_t txn = p.txn;
  BeginMsg b;
  b.txn = txn;
  b.base_version = p.base_version;
  out.push_back(to_raw(b));
  for (const Level2Op& op : ops) out.push_back(op_message(txn, op));
  CommitMsg c;
  c.txn = txn;
  c.version = p.version;
  c.digest = p.expected.value;
  c.entry_count = p.expected.count;
  out.push_back(to_raw(c));
  p.ops = std::move(ops);
  return p;
}
}  // namespace

PendingTxn TxnBuilder::build(const Level2Shadow& shadow, uint32_t txn, std::vector<Level2Op> ops,
                             std::deque<RawMessage>& out) {
  PendingTxn p;
  p.txn = txn;
  p.base_version = shadow.version();
  p.version = shadow.version() + 1;
  p.expected = shadow.digest_after(ops);
  return emit(std::move(p), std::move(ops), out);
}

PendingTxn TxnBuilder::build_after(const Level2Shadow& shadow, const PendingTxn& before, uint32_t txn,
                                   std::vector<Level2Op> ops, std::deque<RawMessage>& out) {
  PendingTxn p;
  p.txn = txn;
  p.base_version = before.version;
  p.version = before.version + 1;
  p.expected = shadow.digest_after(ops, before.ops, before.expected);
  return emit(std::move(p), std::move(ops), out);
}

PendingTxn TxnBuilder::build_replay(const Level2Shadow& shadow, uint32_t txn, uint64_t new_version,
                                    std::deque<RawMessage>& out) {
  PendingTxn p;
  p.txn = txn;
  p.replay = true;
  p.base_version = shadow.version();
  p.version = new_version;
  p.expected = shadow.digest();
  SyncStartMsg s;
  s.txn = txn;
  s.base_version = shadow.version();
  out.push_back(to_raw(s));
  for (const auto& [k, e] : shadow.entries()) {
    PutMsg put;
    put.txn = txn;
    put.entry = e;
    out.push_back(to_raw(put));
  }
  CommitMsg c;
  c.hdr.type = MessageType::kSyncEnd;
  c.txn = txn;
  c.version = new_version;
  c.digest = p.expected.value;
  c.entry_count = p.expected.count;
  out.push_back(to_raw(c));
  return p;
}

}  // namespace tandem::dpu
