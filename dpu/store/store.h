// SQLite (WAL) persistence of the agent's state. Every accepted change is
// written and committed (synchronous=FULL) before the agent acknowledges it,
// so load() after any crash reproduces exactly the acknowledged level-1 state;
// it also keeps, per RNIC, the level-2 table the agent last saw committed, so
// a restarted agent can digest-reconcile instead of replaying. Control plane:
// failures throw StoreError.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <stdexcept>
#include <string>
#include <unordered_map>
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
  std::vector<MappingKey> replaced;  // keys that were mapped before (a replace import)
};

// The level-2 table the agent last saw an RNIC commit.
struct Level2Snapshot {
  uint64_t version = 0;
  uint64_t digest = 0;
  std::vector<common::Level2Entry> entries;
};

// Fleet mode (dpu/fleet): the etcd revision level 1 was brought to, and the
// server name it was brought to it as.
struct FleetRevision {
  std::string server;
  int64_t revision = 0;  // 0: never synced
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
  // Fleet mode: the changes an etcd revision asked for and that revision, in
  // one transaction, so a restart resumes exactly after what is on disk.
  void persist(const std::vector<Change>& cs, const FleetRevision& rev);
  FleetRevision fleet_revision() const;

  // Rebuilds the level-1 state from disk into an empty state.
  void load(Level1State& state) const;

  // Bulk mapping import: every row is validated against the state (and the
  // other rows: a key twice in one file is refused); if all pass they are
  // written in one transaction and applied, else nothing is written or
  // applied. With `replace`, keys already mapped are replaced, else refused.
  // CSV rows:
  //   vni,overlay_ip,underlay_ip,next_hop_mac,rnic   (a first line starting "vni" is a header)
  // JSONL rows: {"vni":1,"overlay_ip":"..","underlay_ip":"..","next_hop_mac":"..","rnic":".."}
  // Runs to completion; MappingImport (mapping_import.h) does it in steps.
  ImportResult import_mappings(std::istream& in, ImportFormat fmt, Level1State& state, bool replace = false);

  // The write transaction of a bulk import, filled across agent loop
  // iterations (MappingImport). Level-2 saves made while it is open wait in
  // memory and are written when it ends (they are bookkeeping for reconcile;
  // a crash meanwhile costs a replay, never a wrong table); persist() is
  // refused meanwhile (the control API holds changes back during an import).
  void bulk_begin();
  void bulk_put_mapping(const AddMapping& m);  // INSERT, or INSERT OR REPLACE if m.replace
  void bulk_commit();
  void bulk_rollback() noexcept;
  // After bulk_commit: copies the import's WAL frames into the database (its
  // own step: automatic checkpoints are off during a bulk import, so the
  // COMMIT does not include one) and restores the normal settings. False if
  // SQLite could not checkpoint now (harmless: a later commit does it).
  // With a background checkpointer set, it is handed the job instead (a
  // second connection elsewhere copies the frames while this one goes on;
  // automatic checkpoints stay off until background_checkpoint_done()).
  bool bulk_checkpoint() noexcept;
  using BackgroundCheckpointer = std::function<bool(const std::string& db_path)>;  // true: started
  void set_background_checkpointer(BackgroundCheckpointer f) { checkpointer_ = std::move(f); }
  void background_checkpoint_done() noexcept {
    if (!bulk_open_) restore_settings();  // a newer import restores them when it ends
  }
  const std::string& path() const noexcept { return path_; }
  bool bulk_open() const noexcept { return bulk_open_; }

  // Level-2 bookkeeping per RNIC, written when COMMITTED arrives. Not
  // fsync'd (the agent's loop must not wait for the disk): durable with the
  // next level-1 commit or checkpoint; a power loss before costs a replay.
  void save_level2(const std::string& rnic, uint64_t version, uint64_t digest,
                   const std::vector<common::Level2Entry>& puts,
                   const std::vector<common::EntryKey>& dels, bool replace_all);
  Level2Snapshot load_level2(const std::string& rnic) const;
  // Level-1 transactions committed to this store over its life (persist and
  // bulk imports; kept in meta): the version operators compare views by.
  uint64_t level1_version() const noexcept { return level1_version_; }

 private:
  void exec(const char* sql) const;
  void migrate_v1();
  void bump_level1_version();
  void migrate_v2();
  sqlite3_stmt* prepare(const char* sql) const;
  void persist_one(const Change& c);
  // Statements persist_one repeats, prepared once (a fleet batch writes thousands).
  sqlite3_stmt* cached(const char* sql);
  std::unordered_map<const char*, sqlite3_stmt*> cached_;
  void bulk_end() noexcept;
  void restore_settings() noexcept;
  std::string path_;
  sqlite3* db_ = nullptr;
  bool bulk_open_ = false;
  uint64_t level1_version_ = 0;
  BackgroundCheckpointer checkpointer_;
  sqlite3_stmt* bulk_insert_ = nullptr;
  sqlite3_stmt* bulk_replace_ = nullptr;
  struct DeferredLevel2 {
    std::string rnic;
    uint64_t version, digest;
    std::vector<common::Level2Entry> puts;
    std::vector<common::EntryKey> dels;
    bool replace_all;
  };
  std::vector<DeferredLevel2> deferred_l2_;
};

// check -> persist -> apply: the order that makes "acknowledged" mean "on disk".
ModelResult accept_change(Level1State& state, Store& store, const Change& c);

}  // namespace tandem::dpu
