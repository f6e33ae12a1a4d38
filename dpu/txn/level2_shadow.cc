// Level-2 shadow bookkeeping.
#include "dpu/txn/level2_shadow.h"

namespace tandem::dpu {

using common::EntryKey;
using common::Level2Entry;

common::TableDigest Level2Shadow::digest_after(const std::vector<Level2Op>& ops) const {
  // Later ops see earlier ones: track the txn's own view of touched keys.
  std::unordered_map<EntryKey, std::pair<bool, Level2Entry>, EntryKeyHash> touched;
  common::TableDigest d = digest_;
  for (const Level2Op& op : ops) {
    const Level2Entry* cur = nullptr;
    auto it = touched.find(op.entry.key);
    if (it != touched.end()) {
      if (it->second.first) cur = &it->second.second;
    } else {
      cur = find(op.entry.key);
    }
    if (op.del) {
      if (cur) d.remove(*cur);
      touched[op.entry.key] = {false, Level2Entry{}};
    } else {
      if (cur && *cur == op.entry) continue;  // same entry again: the RNIC treats it as a no-op
      if (cur) d.remove(*cur);
      d.add(op.entry);
      touched[op.entry.key] = {true, op.entry};
    }
  }
  return d;
}

void Level2Shadow::apply(const std::vector<Level2Op>& ops, uint64_t new_version,
                         std::vector<Level2Entry>* net_puts, std::vector<EntryKey>* net_dels) {
  std::unordered_map<EntryKey, bool, EntryKeyHash> touched;
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
    touched[op.entry.key] = true;
  }
  version_ = new_version;
  for (const auto& [k, _] : touched) {
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
