// SQLite (WAL) persistence of the agent's state. Every accepted change is
// written and committed (synchronous=FULL) before the agent acknowledges it,
// so load() after any crash reproduces exactly the acknowledged level-1 state;
// it also keeps, per RNIC, the level-2 table the agent last saw committed, so
// a restarted agent can digest-reconcile instead of replaying. Control plane:
// failures throw StoreError.
#pragma once

#include <cstdint>
#include <istream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/channel/messages.h"
#include "dpu/model/change.h"
#include "dpu/model/level1_state.h"

struct sqlite3;
struct sqlite3_stmt;

namespace tandem::dpu {

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ImportFormat : uint8_t { kCsv, kJsonl };

struct ImportResult {
  ModelResult result;      // first error (with its line number), or ok
  std::size_t imported = 0;
};

// The level-2 table the agent last saw an RNIC commit.
struct Level2Snapshot {
  uint64_t version = 0;
  uint64_t digest = 0;
  std::vector<common::Level2Entry> entries;
};

class Store {
 public:
  explicit Store(const std::string& path);  // creates the schema if new
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Persists changes in one SQLite transaction, durable on return. The
  // caller has checked them against the state (see accept_change).
  void persist(const Change& c);
  void persist(const std::vector<Change>& cs);

  // Rebuilds the level-1 state from disk into an empty state.
  void load(Level1State& state) const;

  // Bulk mapping import: every row is validated against the state (and the
  // rows before it); if all pass they are written in one transaction and
  // applied, else nothing is written or applied. CSV rows:
  //   vni,overlay_ip,underlay_ip,next_hop_mac,rnic   (a first line starting "vni" is a header)
  // JSONL rows: {"vni":1,"overlay_ip":"..","underlay_ip":"..","next_hop_mac":"..","rnic":".."}
  ImportResult import_mappings(std::istream& in, ImportFormat fmt, Level1State& state);

  // Level-2 bookkeeping per RNIC, written when COMMITTED arrives.
  void save_level2(const std::string& rnic, uint64_t version, uint64_t digest,
                   const std::vector<common::Level2Entry>& puts,
                   const std::vector<common::EntryKey>& dels, bool replace_all);
  Level2Snapshot load_level2(const std::string& rnic) const;

 private:
  void exec(const char* sql) const;
  sqlite3_stmt* prepare(const char* sql) const;
  void persist_one(const Change& c);
  sqlite3* db_ = nullptr;
};

// check -> persist -> apply: the order that makes "acknowledged" mean "on disk".
ModelResult accept_change(Level1State& state, Store& store, const Change& c);

}  // namespace tandem::dpu
