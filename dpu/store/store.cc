// SQLite schema, change persistence, replay and bulk import.
#include "dpu/store/store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "dpu/model/address.h"
#include "dpu/store/mapping_import.h"

namespace tandem::dpu {

namespace {

// 2: tenants have a partition (P_Key) and a flow quota; a version-1 store is
// migrated on open.
// 3: fleet_sync, the etcd revision level 1 was last brought to (fleet mode);
// a version-2 store gets the empty table on open.
constexpr int kSchemaVersion = 3;

const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tenants(vni INTEGER PRIMARY KEY, name TEXT NOT NULL,
  partition_key INTEGER NOT NULL DEFAULT 0, flow_quota INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS rnics(seq INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,
  underlay_ip INTEGER NOT NULL, mac INTEGER NOT NULL, path_base_port INTEGER NOT NULL,
  path_count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS vnics(seq INTEGER PRIMARY KEY, id INTEGER UNIQUE NOT NULL,
  vni INTEGER NOT NULL, rnic TEXT NOT NULL, overlay_ip INTEGER NOT NULL, overlay_mac INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS qps(seq INTEGER PRIMARY KEY, vnic INTEGER NOT NULL, qpn INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS mappings(vni INTEGER NOT NULL, overlay_ip INTEGER NOT NULL,
  underlay_ip INTEGER NOT NULL, next_hop_mac INTEGER NOT NULL, rnic TEXT NOT NULL,
  PRIMARY KEY(vni, overlay_ip)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS peerings(seq INTEGER PRIMARY KEY, vni_a INTEGER NOT NULL, vni_b INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS l2_tables(rnic TEXT PRIMARY KEY, version INTEGER NOT NULL, digest INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS l2_entries(rnic TEXT NOT NULL, kind INTEGER NOT NULL, word0 INTEGER NOT NULL,
  word1 INTEGER NOT NULL, entry BLOB NOT NULL, PRIMARY KEY(rnic, kind, word0, word1)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fleet_sync(id INTEGER PRIMARY KEY CHECK(id = 1), server TEXT NOT NULL,
  revision INTEGER NOT NULL);
)sql";

int64_t mac_to_int(const MacAddr& m) {
  int64_t v = 0;
  for (uint8_t b : m) v = (v << 8) | b;
  return v;
}
MacAddr int_to_mac(int64_t v) {
  MacAddr m{};
  for (int i = 5; i >= 0; --i) {
    m[i] = static_cast<uint8_t>(v & 0xFF);
    v >>= 8;
  }
  return m;
}

// One prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK)
      throw StoreError(std::string("store: prepare failed: ") + sqlite3_errmsg(db));
  }
  // A statement the store keeps prepared (Store::cached): reset, not finalized.
  Stmt(sqlite3* db, sqlite3_stmt* kept) : db_(db), s_(kept), owned_(false) {}
  ~Stmt() {
    if (owned_) {
      sqlite3_finalize(s_);
    } else {
      sqlite3_reset(s_);
      sqlite3_clear_bindings(s_);
    }
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind_blob(int i, const void* p, int n) {
    sqlite3_bind_blob(s_, i, p, n, SQLITE_TRANSIENT);
    return *this;
  }
  // Runs a statement that returns no rows, then resets it for reuse.
  void run() {
    int rc = sqlite3_step(s_);
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
    if (rc != SQLITE_DONE) throw StoreError(std::string("store: write failed: ") + sqlite3_errmsg(db_));
  }
  bool row() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) throw StoreError(std::string("store: read failed: ") + sqlite3_errmsg(db_));
    return false;
  }
  int64_t i64(int col) const { return sqlite3_column_int64(s_, col); }
  uint32_t u32(int col) const { return static_cast<uint32_t>(sqlite3_column_int64(s_, col)); }
  std::string text(int col) const {
    auto* p = sqlite3_column_text(s_, col);
    return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(s_, col)) : std::string();
  }
  const void* blob(int col, int& n) const {
    n = sqlite3_column_bytes(s_, col);
    return sqlite3_column_blob(s_, col);
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  bool owned_ = true;
};

// BEGIN IMMEDIATE .. COMMIT, rolled back if an exception leaves the scope.
class Txn {
 public:
  explicit Txn(sqlite3* db) : db_(db) { exec("BEGIN IMMEDIATE"); }
  ~Txn() {
    if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void commit() {
    exec("COMMIT");
    done_ = true;
  }

 private:
  void exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = std::string("store: ") + sql + " failed: " + (err ? err : "?");
      sqlite3_free(err);
      throw StoreError(msg);
    }
  }
  sqlite3* db_;
  bool done_ = false;
};

}  // namespace

Store::Store(const std::string& path) : path_(path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = "store: cannot open " + path + ": " + (db_ ? sqlite3_errmsg(db_) : "out of memory");
    sqlite3_close(db_);
    db_ = nullptr;
    throw StoreError(msg);
  }
  sqlite3_busy_timeout(db_, 2000);
  exec("PRAGMA journal_mode=WAL");
  exec("PRAGMA synchronous=FULL");  // a COMMIT that returned survives power loss
  exec("PRAGMA foreign_keys=OFF");
  exec("PRAGMA cache_size=-65536");  // 64 MiB: bulk imports and 16M-row loads stay in memory
  exec(kSchema);
  Stmt get(db_, "SELECT value FROM meta WHERE key='schema_version'");
  if (get.row()) {
    int64_t v = get.i64(0);
    if (v == 1) migrate_v1(), v = 2;
    if (v == 2) migrate_v2(), v = 3;
    if (v != kSchemaVersion)
      throw StoreError("store: " + path + " has schema version " + std::to_string(v) +
                       ", this agent needs " + std::to_string(kSchemaVersion));
  } else {
    Stmt(db_, "INSERT INTO meta(key, value) VALUES('schema_version', ?)").bind(1, kSchemaVersion).run();
  }
  Stmt v(db_, "SELECT value FROM meta WHERE key='level1_version'");
  if (v.row()) level1_version_ = static_cast<uint64_t>(v.i64(0));
}

// Version 1 had no partitions: every tenant gets one, the lowest free in VNI
// order, in one transaction with the version bump.
void Store::migrate_v1() {
  Txn t(db_);
  exec("ALTER TABLE tenants ADD COLUMN partition_key INTEGER NOT NULL DEFAULT 0");
  exec("ALTER TABLE tenants ADD COLUMN flow_quota INTEGER NOT NULL DEFAULT 0");
  std::vector<uint32_t> vnis;
  {
    Stmt s(db_, "SELECT vni FROM tenants ORDER BY vni");
    while (s.row()) vnis.push_back(s.u32(0));
  }
  if (vnis.size() > kMaxPartition)
    throw StoreError("store: " + std::to_string(vnis.size()) + " tenants, more than the " +
                     std::to_string(kMaxPartition) + " partitions");
  Stmt up(db_, "UPDATE tenants SET partition_key=? WHERE vni=?");
  for (std::size_t i = 0; i < vnis.size(); ++i) up.bind(1, static_cast<int64_t>(i + 1)).bind(2, vnis[i]).run();
  Stmt(db_, "UPDATE meta SET value=2 WHERE key='schema_version'").run();
  t.commit();
}

// Version 2 had no fleet mode: the table (created by kSchema above) starts
// empty, so a fleet agent on an old store reads etcd whole and applies the
// difference.
void Store::migrate_v2() {
  Txn t(db_);
  exec("CREATE TABLE IF NOT EXISTS fleet_sync(id INTEGER PRIMARY KEY CHECK(id = 1), server TEXT NOT NULL,"
       " revision INTEGER NOT NULL)");
  Stmt(db_, "UPDATE meta SET value=3 WHERE key='schema_version'").run();
  t.commit();
}

Store::~Store() {
  bulk_rollback();
  for (auto& [sql, st] : cached_) sqlite3_finalize(st);
  sqlite3_close(db_);
}

sqlite3_stmt* Store::cached(const char* sql) {
  auto [it, fresh] = cached_.try_emplace(sql, nullptr);
  if (fresh && sqlite3_prepare_v2(db_, sql, -1, &it->second, nullptr) != SQLITE_OK) {
    cached_.erase(it);
    throw StoreError(std::string("store: prepare failed: ") + sqlite3_errmsg(db_));
  }
  return it->second;
}

void Store::exec(const char* sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = std::string("store: ") + (err ? err : "?");
    sqlite3_free(err);
    throw StoreError(msg);
  }
}

void Store::persist_one(const Change& c) {
  std::visit(
      [this](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, AddTenant>) {
          Stmt(db_, cached("INSERT INTO tenants(vni, name, partition_key, flow_quota) VALUES(?, ?, ?, ?)"))
              .bind(1, x.vni).bind(2, x.name).bind(3, x.partition).bind(4, x.flow_quota).run();
        } else if constexpr (std::is_same_v<T, RemoveTenant>) {
          Stmt(db_, cached("DELETE FROM tenants WHERE vni=?")).bind(1, x.vni).run();
          Stmt(db_, cached("DELETE FROM peerings WHERE vni_a=? OR vni_b=?")).bind(1, x.vni).bind(2, x.vni).run();
        } else if constexpr (std::is_same_v<T, AddRnic>) {
          Stmt(db_, cached("INSERT INTO rnics(name, underlay_ip, mac, path_base_port, path_count) VALUES(?,?,?,?,?)"))
              .bind(1, x.name).bind(2, x.underlay_ip).bind(3, mac_to_int(x.mac))
              .bind(4, x.path_base_port).bind(5, x.path_count).run();
        } else if constexpr (std::is_same_v<T, AddVnic>) {
          Stmt(db_, cached("INSERT INTO vnics(id, vni, rnic, overlay_ip, overlay_mac) VALUES(?,?,?,?,?)"))
              .bind(1, x.id).bind(2, x.vni).bind(3, x.rnic).bind(4, x.overlay_ip)
              .bind(5, mac_to_int(x.overlay_mac)).run();
        } else if constexpr (std::is_same_v<T, RemoveVnic>) {
          Stmt(db_, cached("DELETE FROM vnics WHERE id=?")).bind(1, x.id).run();
          Stmt(db_, cached("DELETE FROM qps WHERE vnic=?")).bind(1, x.id).run();
        } else if constexpr (std::is_same_v<T, BindQp>) {
          Stmt(db_, cached("INSERT INTO qps(vnic, qpn) VALUES(?, ?)")).bind(1, x.vnic).bind(2, x.qpn).run();
        } else if constexpr (std::is_same_v<T, AddMapping>) {
          // A replace overwrites the row of its key; a plain add must not find one.
          Stmt(db_, cached(x.replace ? "INSERT OR REPLACE INTO mappings(vni, overlay_ip, underlay_ip, next_hop_mac, rnic) VALUES(?,?,?,?,?)"
                              : "INSERT INTO mappings(vni, overlay_ip, underlay_ip, next_hop_mac, rnic) VALUES(?,?,?,?,?)"))
              .bind(1, x.vni).bind(2, x.overlay_ip).bind(3, x.underlay_ip)
              .bind(4, mac_to_int(x.next_hop_mac)).bind(5, x.rnic).run();
        } else if constexpr (std::is_same_v<T, RemoveMapping>) {
          Stmt(db_, cached("DELETE FROM mappings WHERE vni=? AND overlay_ip=?")).bind(1, x.vni).bind(2, x.overlay_ip).run();
        } else if constexpr (std::is_same_v<T, AllowPeering>) {
          Stmt(db_, cached("INSERT INTO peerings(vni_a, vni_b) VALUES(?, ?)")).bind(1, x.vni_a).bind(2, x.vni_b).run();
        } else if constexpr (std::is_same_v<T, SetTenantQuota>) {
          Stmt(db_, cached("UPDATE tenants SET flow_quota=? WHERE vni=?")).bind(1, x.flow_quota).bind(2, x.vni).run();
        }
      },
      c);
}

void Store::persist(const Change& c) {
  if (bulk_open_) throw StoreError("store: a bulk import is writing; try again when it is done");
  Txn t(db_);
  persist_one(c);
  bump_level1_version();
  t.commit();
  ++level1_version_;
}

void Store::persist(const std::vector<Change>& cs) {
  if (bulk_open_) throw StoreError("store: a bulk import is writing; try again when it is done");
  Txn t(db_);
  for (const Change& c : cs) persist_one(c);
  bump_level1_version();
  t.commit();
  ++level1_version_;
}

void Store::bump_level1_version() {
  exec("INSERT INTO meta(key, value) VALUES('level1_version', 1) "
       "ON CONFLICT(key) DO UPDATE SET value = value + 1");
}

void Store::persist(const std::vector<Change>& cs, const FleetRevision& rev) {
  if (bulk_open_) throw StoreError("store: a bulk import is writing; try again when it is done");
  Txn t(db_);
  for (const Change& c : cs) persist_one(c);
  Stmt(db_, cached("INSERT OR REPLACE INTO fleet_sync(id, server, revision) VALUES(1, ?, ?)"))
      .bind(1, rev.server).bind(2, rev.revision).run();
  t.commit();
}

FleetRevision Store::fleet_revision() const {
  Stmt s(db_, "SELECT server, revision FROM fleet_sync WHERE id=1");
  if (!s.row()) return {};
  return FleetRevision{s.text(0), s.i64(1)};
}

void Store::load(Level1State& state) const {
  auto replay = [&](const Change& c) {
    ModelResult r = state.apply(c);
    if (!r.ok()) throw StoreError("store: stored state does not replay: " + r.message);
  };
  {
    // shared: a partition two tenants were given on purpose replays in any order.
    Stmt s(db_, "SELECT vni, name, partition_key, flow_quota FROM tenants ORDER BY vni");
    while (s.row()) replay(AddTenant{s.u32(0), s.text(1), static_cast<uint16_t>(s.i64(2)), true, s.u32(3)});
  }
  {
    Stmt s(db_, "SELECT name, underlay_ip, mac, path_base_port, path_count FROM rnics ORDER BY seq");
    while (s.row())
      replay(AddRnic{s.text(0), s.u32(1), int_to_mac(s.i64(2)), static_cast<uint16_t>(s.i64(3)),
                     static_cast<uint8_t>(s.i64(4))});
  }
  {
    Stmt s(db_, "SELECT id, vni, rnic, overlay_ip, overlay_mac FROM vnics ORDER BY seq");
    while (s.row()) replay(AddVnic{s.u32(0), s.u32(1), s.text(2), s.u32(3), int_to_mac(s.i64(4))});
  }
  {
    Stmt s(db_, "SELECT vnic, qpn FROM qps ORDER BY seq");
    while (s.row()) replay(BindQp{s.u32(0), s.u32(1)});
  }
  {
    Stmt n(db_, "SELECT count(*) FROM mappings");
    if (n.row()) state.reserve_mappings(state.mappings().size() + static_cast<std::size_t>(n.i64(0)));
    Stmt s(db_, "SELECT vni, overlay_ip, underlay_ip, next_hop_mac, rnic FROM mappings");
    while (s.row()) replay(AddMapping{s.u32(0), s.u32(1), s.u32(2), int_to_mac(s.i64(3)), s.text(4)});
  }
  {
    Stmt s(db_, "SELECT vni_a, vni_b FROM peerings ORDER BY seq");
    while (s.row()) replay(AllowPeering{s.u32(0), s.u32(1)});
  }
}

ImportResult Store::import_mappings(std::istream& in, ImportFormat fmt, Level1State& state, bool replace) {
  MappingImport job(*this, state, in, fmt, replace);
  while (!job.step(SIZE_MAX)) {
  }
  return job.result();
}

namespace {
constexpr const char* kInsertMapping =
    "INSERT INTO mappings(vni, overlay_ip, underlay_ip, next_hop_mac, rnic) VALUES(?,?,?,?,?)";
constexpr const char* kReplaceMapping =
    "INSERT OR REPLACE INTO mappings(vni, overlay_ip, underlay_ip, next_hop_mac, rnic) VALUES(?,?,?,?,?)";
}  // namespace

void Store::bulk_begin() {
  if (bulk_open_) throw StoreError("store: a bulk import is already open");
  if (sqlite3_prepare_v2(db_, kInsertMapping, -1, &bulk_insert_, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db_, kReplaceMapping, -1, &bulk_replace_, nullptr) != SQLITE_OK) {
    std::string msg = std::string("store: prepare failed: ") + sqlite3_errmsg(db_);
    bulk_end();
    throw StoreError(msg);
  }
  try {
    // A small page cache spills the import's pages to the WAL during the
    // INSERT steps, so the COMMIT writes little; no automatic checkpoint
    // inside the COMMIT either (bulk_checkpoint is a step of its own).
    exec("PRAGMA cache_size=-4096");
    exec("PRAGMA wal_autocheckpoint=0");
    exec("BEGIN IMMEDIATE");
  } catch (...) {
    bulk_end();
    throw;
  }
  bulk_open_ = true;
}

void Store::bulk_put_mapping(const AddMapping& m) {
  sqlite3_stmt* s = m.replace ? bulk_replace_ : bulk_insert_;
  sqlite3_bind_int64(s, 1, m.vni);
  sqlite3_bind_int64(s, 2, m.overlay_ip);
  sqlite3_bind_int64(s, 3, m.underlay_ip);
  sqlite3_bind_int64(s, 4, mac_to_int(m.next_hop_mac));
  sqlite3_bind_text(s, 5, m.rnic.data(), static_cast<int>(m.rnic.size()), SQLITE_TRANSIENT);
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  if (rc != SQLITE_DONE) throw StoreError(std::string("store: write failed: ") + sqlite3_errmsg(db_));
}

void Store::bulk_commit() {
  bump_level1_version();
  exec("COMMIT");  // on failure the caller rolls back
  ++level1_version_;
  bulk_end();
}

void Store::bulk_rollback() noexcept {
  if (bulk_open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  bulk_end();
  restore_settings();
}

bool Store::bulk_checkpoint() noexcept {
  if (checkpointer_) {
    sqlite3_exec(db_, "PRAGMA cache_size=-65536", nullptr, nullptr, nullptr);
    bool started = false;
    try {
      started = checkpointer_(path_);
    } catch (...) {
    }
    if (started) return true;  // background_checkpoint_done() restores the rest
  }
  int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
  restore_settings();
  return rc == SQLITE_OK;
}

void Store::restore_settings() noexcept {
  sqlite3_exec(db_, "PRAGMA cache_size=-65536", nullptr, nullptr, nullptr);
  sqlite3_exec(db_, "PRAGMA wal_autocheckpoint=1000", nullptr, nullptr, nullptr);
}

void Store::bulk_end() noexcept {
  sqlite3_finalize(bulk_insert_);
  sqlite3_finalize(bulk_replace_);
  bulk_insert_ = bulk_replace_ = nullptr;
  bool was_open = bulk_open_;
  bulk_open_ = false;
  if (!was_open) return;
  // The level-2 saves that waited for the import's transaction.
  std::vector<DeferredLevel2> later = std::move(deferred_l2_);
  deferred_l2_.clear();
  for (const DeferredLevel2& d : later) {
    try {
      save_level2(d.rnic, d.version, d.digest, d.puts, d.dels, d.replace_all);
    } catch (const StoreError&) {
      // Lost bookkeeping only: a restarted agent replays instead of reconciling.
    }
  }
}

void Store::save_level2(const std::string& rnic, uint64_t version, uint64_t digest,
                        const std::vector<common::Level2Entry>& puts,
                        const std::vector<common::EntryKey>& dels, bool replace_all) {
  if (bulk_open_) {
    if (replace_all)  // supersedes everything saved for this RNIC before it
      std::erase_if(deferred_l2_, [&](const DeferredLevel2& d) { return d.rnic == rnic; });
    deferred_l2_.push_back(DeferredLevel2{rnic, version, digest, puts, dels, replace_all});
    return;
  }
  // Bookkeeping for reconcile, not a promise to anyone: committed without an
  // fsync (the WAL reaches the disk with the next level-1 commit or
  // checkpoint). This runs in the agent's loop on every COMMITTED; an fsync
  // there took seconds while other processes wrote to the disk, and every
  // RNIC's punts waited that long (a power loss costs a replay instead).
  exec("PRAGMA synchronous=NORMAL");
  struct Restore {
    sqlite3* db;
    ~Restore() { sqlite3_exec(db, "PRAGMA synchronous=FULL", nullptr, nullptr, nullptr); }
  } restore{db_};
  Txn t(db_);
  if (replace_all) Stmt(db_, "DELETE FROM l2_entries WHERE rnic=?").bind(1, rnic).run();
  {
    Stmt del(db_, "DELETE FROM l2_entries WHERE rnic=? AND kind=? AND word0=? AND word1=?");
    for (const auto& k : dels)
      del.bind(1, rnic).bind(2, static_cast<int64_t>(k.kind)).bind(3, k.word0).bind(4, k.word1).run();
    Stmt put(db_, "INSERT OR REPLACE INTO l2_entries(rnic, kind, word0, word1, entry) VALUES(?,?,?,?,?)");
    for (const auto& e : puts)
      put.bind(1, rnic).bind(2, static_cast<int64_t>(e.key.kind)).bind(3, e.key.word0).bind(4, e.key.word1)
          .bind_blob(5, &e, sizeof e).run();
  }
  Stmt(db_, "INSERT OR REPLACE INTO l2_tables(rnic, version, digest) VALUES(?,?,?)")
      .bind(1, rnic).bind(2, static_cast<int64_t>(version)).bind(3, static_cast<int64_t>(digest)).run();
  t.commit();
}

Level2Snapshot Store::load_level2(const std::string& rnic) const {
  Level2Snapshot snap;
  {
    Stmt s(db_, "SELECT version, digest FROM l2_tables WHERE rnic=?");
    s.bind(1, rnic);
    if (!s.row()) return snap;
    snap.version = static_cast<uint64_t>(s.i64(0));
    snap.digest = static_cast<uint64_t>(s.i64(1));
  }
  Stmt s(db_, "SELECT entry FROM l2_entries WHERE rnic=?");
  s.bind(1, rnic);
  while (s.row()) {
    int n = 0;
    const void* p = s.blob(0, n);
    if (n != static_cast<int>(sizeof(common::Level2Entry)))
      throw StoreError("store: level-2 entry of " + rnic + " has " + std::to_string(n) + " bytes");
    common::Level2Entry e;
    std::memcpy(static_cast<void*>(&e), p, sizeof e);
    snap.entries.push_back(e);
  }
  return snap;
}

ModelResult accept_change(Level1State& state, Store& store, const Change& c) {
  if (const auto* t = std::get_if<AddTenant>(&c); t && t->partition == 0) {
    AddTenant filled = *t;  // what is stored and applied names its partition
    filled.partition = state.free_partition();
    if (filled.partition == 0)
      return {ModelErrc::kBadValue, "all " + std::to_string(kMaxPartition) +
                                        " partitions are taken: remove a tenant first (docs/partitions.md)"};
    return accept_change(state, store, Change{std::move(filled)});
  }
  ModelResult r = state.check(c);
  if (!r.ok()) return r;
  store.persist(c);
  return state.apply(c);
}

}  // namespace tandem::dpu
