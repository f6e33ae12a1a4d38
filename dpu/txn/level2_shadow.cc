// Level-2 shadow bookkeeping.
#include "dpu/txn/level2_shadow.h"

#include <algorithm>

namespace tandem::dpu {

using common::EntryKey;
using common::Level2Entry;

namespace {
// Small transactions (the common case: a few punts) find a key's earlier op by
// scanning back; larger ones index the ops.
constexpr std::size_t kScanLimit = 64;

bool key_less(const EntryKey& a, const EntryKey& b) {
  if (a.kind != b.kind) return a.kind < b.kind;
  if (a.word0 != b.word0) return a.word0 < b.word0;
  return a.word1 < b.word1;
}
}  // namespace

common::TableDigest Level2Shadow::digest_after(const std::vector<Level2Op>& ops) const {
  // Later ops see earlier ones: an op's "current" entry is the last earlier op
  // on the same key, else the committed one.
  std::unordered_map<EntryKey, std::size_t, EntryKeyHash> last;  // key -> index of its latest op
  const bool indexed = ops.size() > kScanLimit;
  if (indexed) last.reserve(ops.size());
  common::TableDigest d = digest_;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Level2Op& op = ops[i];
    const Level2Op* prev = nullptr;
    if (indexed) {
      auto it = last.find(op.entry.key);
      if (it != last.end()) prev = &ops[it->second];
      last[op.entry.key] = i;
    } else {
      for (std::size_t j = i; j-- > 0;)
        if (ops[j].entry.key == op.entry.key) {
          prev = &ops[j];
          break;
        }
    }
    const Level2Entry* cur = prev ? (prev->del ? nullptr : &prev->entry) : find(op.entry.key);
    if (op.del) {
      if (cur) d.remove(*cur);
    } else {
      if (cur && *cur == op.entry) continue;  // same entry again: the RNIC treats it as a no-op
      if (cur) d.remove(*cur);
      d.add(op.entry);
    }
  }
  return d;
}

void Level2Shadow::apply(const std::vector<Level2Op>& ops, uint64_t new_version,
                         std::vector<Level2Entry>* net_puts, std::vector<EntryKey>* net_dels) {
  std::vector<EntryKey> touched;
  touched.reserve(ops.size());
  for (const Level2Op& op : ops) {
    auto it = entries_.find(op.entry.key);
    if (op.del) {
      if (it != entries_.end()) {
        digest_.remove(it->second);
        entries_.erase(it);
      }
    } else if (it == entries_.end()) {
      digest_.add(op.entry);
      entries_.emplace(op.entry.key, op.entry);
    } else if (!(it->second == op.entry)) {
      digest_.remove(it->second);
      digest_.add(op.entry);
      it->second = op.entry;
    }
    touched.push_back(op.entry.key);
  }
  version_ = new_version;
  if (!net_puts && !net_dels) return;
  std::sort(touched.begin(), touched.end(), key_less);
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  if (net_puts) net_puts->reserve(touched.size());
  for (const EntryKey& k : touched) {
    const Level2Entry* e = find(k);
    if (e && net_puts) net_puts->push_back(*e);
    if (!e && net_dels) net_dels->push_back(k);
  }
}

void Level2Shadow::reset(uint64_t version, const std::vector<Level2Entry>& entries) {
  entries_.clear();
  digest_ = {};
  for (const Level2Entry& e : entries) entries_.insert_or_assign(e.key, e);  // last one wins
  for (const auto& [k, e] : entries_) digest_.add(e);
  version_ = version;
}

std::vector<Level2Entry> Level2Shadow::snapshot() const {
  std::vector<Level2Entry> out;
  out.reserve(entries_.size());
  for (const auto& [k, e] : entries_) out.push_back(e);
  return out;
}

}  // namespace tandem::dpu
