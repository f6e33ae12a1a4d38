// SQLite schema, change persistence, replay and bulk import.
#include "dpu/store/store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "dpu/model/address.h"

namespace tandem::dpu {

namespace {

constexpr int kSchemaVersion = 1;

const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tenants(vni INTEGER PRIMARY KEY, name TEXT NOT NULL);
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
  ~Stmt() { sqlite3_finalize(s_); }
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

// A mapping row as parsed from an import file: compact so 16M rows fit.
struct ImportRow {
  uint32_t vni = 0, overlay_ip = 0, underlay_ip = 0;
  MacAddr mac{};
  uint16_t rnic = 0;  // index into the import's RNIC name list
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool parse_u32(std::string_view s, uint32_t& out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > 0xFFFFFFFFu) return false;
  out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

Store::Store(const std::string& path) {
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
    if (get.i64(0) != kSchemaVersion)
      throw StoreError("store: " + path + " has schema version " + std::to_string(get.i64(0)) +
                       ", this agent needs " + std::to_string(kSchemaVersion));
  } else {
    Stmt(db_, "INSERT INTO meta(key, value) VALUES('schema_version', ?)").bind(1, kSchemaVersion).run();
  }
}

Store::~Store() { sqlite3_close(db_); }

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
          Stmt(db_, "INSERT INTO tenants(vni, name) VALUES(?, ?)").bind(1, x.vni).bind(2, x.name).run();
        } else if constexpr (std::is_same_v<T, RemoveTenant>) {
          Stmt(db_, "DELETE FROM tenants WHERE vni=?").bind(1, x.vni).run();
          Stmt(db_, "DELETE FROM peerings WHERE vni_a=? OR vni_b=?").bind(1, x.vni).bind(2, x.vni).run();
        } else if constexpr (std::is_same_v<T, AddRnic>) {
          Stmt(db_, "INSERT INTO rnics(name, underlay_ip, mac, path_base_port, path_count) VALUES(?,?,?,?,?)")
              .bind(1, x.name).bind(2, x.underlay_ip).bind(3, mac_to_int(x.mac))
              .bind(4, x.path_base_port).bind(5, x.path_count).run();
        } else if constexpr (std::is_same_v<T, AddVnic>) {
          Stmt(db_, "INSERT INTO vnics(id, vni, rnic, overlay_ip, overlay_mac) VALUES(?,?,?,?,?)")
              .bind(1, x.id).bind(2, x.vni).bind(3, x.rnic).bind(4, x.overlay_ip)
              .bind(5, mac_to_int(x.overlay_mac)).run();
        } else if constexpr (std::is_same_v<T, RemoveVnic>) {
          Stmt(db_, "DELETE FROM vnics WHERE id=?").bind(1, x.id).run();
          Stmt(db_, "DELETE FROM qps WHERE vnic=?").bind(1, x.id).run();
        } else if constexpr (std::is_same_v<T, BindQp>) {
          Stmt(db_, "INSERT INTO qps(vnic, qpn) VALUES(?, ?)").bind(1, x.vnic).bind(2, x.qpn).run();
        } else if constexpr (std::is_same_v<T, AddMapping>) {
          Stmt(db_, "INSERT INTO mappings(vni, overlay_ip, underlay_ip, next_hop_mac, rnic) VALUES(?,?,?,?,?)")
              .bind(1, x.vni).bind(2, x.overlay_ip).bind(3, x.underlay_ip)
              .bind(4, mac_to_int(x.next_hop_mac)).bind(5, x.rnic).run();
        } else if constexpr (std::is_same_v<T, RemoveMapping>) {
          Stmt(db_, "DELETE FROM mappings WHERE vni=? AND overlay_ip=?").bind(1, x.vni).bind(2, x.overlay_ip).run();
        } else if constexpr (std::is_same_v<T, AllowPeering>) {
          Stmt(db_, "INSERT INTO peerings(vni_a, vni_b) VALUES(?, ?)").bind(1, x.vni_a).bind(2, x.vni_b).run();
        }
      },
      c);
}

void Store::persist(const Change& c) {
  Txn t(db_);
  persist_one(c);
  t.commit();
}

void Store::persist(const std::vector<Change>& cs) {
  Txn t(db_);
  for (const Change& c : cs) persist_one(c);
  t.commit();
}

void Store::load(Level1State& state) const {
  auto replay = [&](const Change& c) {
    ModelResult r = state.apply(c);
    if (!r.ok()) throw StoreError("store: stored state does not replay: " + r.message);
  };
  {
    Stmt s(db_, "SELECT vni, name FROM tenants ORDER BY vni");
    while (s.row()) replay(AddTenant{s.u32(0), s.text(1)});
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

ImportResult Store::import_mappings(std::istream& in, ImportFormat fmt, Level1State& state) {
  ImportResult out;
  std::vector<ImportRow> rows;
  std::vector<std::string> rnics;
  std::string line;
  std::size_t lineno = 0;
  auto bad = [&](ModelErrc code, const std::string& why) {
    out.result = {code, "line " + std::to_string(lineno) + ": " + why};
  };
  auto rnic_index = [&](std::string_view name) -> uint16_t {
    for (std::size_t i = 0; i < rnics.size(); ++i)
      if (rnics[i] == name) return static_cast<uint16_t>(i);
    rnics.emplace_back(name);
    return static_cast<uint16_t>(rnics.size() - 1);
  };
  auto to_change = [&](const ImportRow& r) {
    return AddMapping{r.vni, r.overlay_ip, r.underlay_ip, r.mac, rnics[r.rnic]};
  };
  // Undo what was applied so far: a failed import leaves the state untouched.
  auto undo = [&](std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) state.apply(RemoveMapping{rows[i].vni, rows[i].overlay_ip});
  };

  while (std::getline(in, line)) {
    ++lineno;
    std::string_view l = trim(line);
    if (l.empty() || l[0] == '#') continue;
    ImportRow row;
    std::string_view fields[5];
    std::string mac_s, oip_s, uip_s, rnic_s;
    if (fmt == ImportFormat::kCsv) {
      if (lineno == 1 && l.substr(0, 3) == "vni") continue;  // header
      std::size_t n = 0;
      for (;;) {
        std::size_t comma = l.find(',');
        if (n < 5) fields[n] = trim(l.substr(0, comma));
        ++n;
        if (comma == std::string_view::npos) break;
        l.remove_prefix(comma + 1);
      }
      if (n != 5) {
        bad(ModelErrc::kBadValue, "expected 5 fields: vni,overlay_ip,underlay_ip,next_hop_mac,rnic");
        break;
      }
      if (!parse_u32(fields[0], row.vni)) {
        bad(ModelErrc::kBadValue, "bad VNI '" + std::string(fields[0]) + "'");
        break;
      }
    } else {
      nlohmann::json j = nlohmann::json::parse(l.begin(), l.end(), nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("vni") || !j["vni"].is_number_unsigned() ||
          !j.value("overlay_ip", nlohmann::json()).is_string() ||
          !j.value("underlay_ip", nlohmann::json()).is_string() ||
          !j.value("next_hop_mac", nlohmann::json()).is_string() ||
          !j.value("rnic", nlohmann::json()).is_string()) {
        bad(ModelErrc::kBadValue, "expected {\"vni\":N,\"overlay_ip\":..,\"underlay_ip\":..,\"next_hop_mac\":..,\"rnic\":..}");
        break;
      }
      uint64_t vni = j["vni"].get<uint64_t>();
      row.vni = vni > 0xFFFFFFFFu ? 0xFFFFFFFFu : static_cast<uint32_t>(vni);
      oip_s = j["overlay_ip"].get<std::string>();
      uip_s = j["underlay_ip"].get<std::string>();
      mac_s = j["next_hop_mac"].get<std::string>();
      rnic_s = j["rnic"].get<std::string>();
      fields[1] = oip_s;
      fields[2] = uip_s;
      fields[3] = mac_s;
      fields[4] = rnic_s;
    }
    auto oip = parse_ipv4(fields[1]);
    auto uip = parse_ipv4(fields[2]);
    auto mac = parse_mac(fields[3]);
    if (!oip || !uip || !mac) {
      bad(ModelErrc::kBadAddress, "cannot parse address '" +
                                      std::string(!oip ? fields[1] : !uip ? fields[2] : fields[3]) + "'");
      break;
    }
    row.overlay_ip = *oip;
    row.underlay_ip = *uip;
    row.mac = *mac;
    if (rnics.size() >= 0xFFFF && std::find(rnics.begin(), rnics.end(), fields[4]) == rnics.end()) {
      bad(ModelErrc::kBadValue, "too many distinct RNIC names");
      break;
    }
    row.rnic = rnic_index(fields[4]);
    // Applying as we go also catches duplicates within the file.
    ModelResult r = state.apply(to_change(row));
    if (!r.ok()) {
      bad(r.code, r.message);
      break;
    }
    rows.push_back(row);
  }
  if (!out.result.ok()) {
    undo(rows.size());
    return out;
  }
  // Insert in primary-key order: B-tree appends instead of random leaf
  // updates, which keeps a large import from thrashing the page cache.
  std::vector<uint32_t> order(rows.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return rows[a].vni != rows[b].vni ? rows[a].vni < rows[b].vni : rows[a].overlay_ip < rows[b].overlay_ip;
  });
  try {
    Txn t(db_);
    Stmt ins(db_, "INSERT INTO mappings(vni, overlay_ip, underlay_ip, next_hop_mac, rnic) VALUES(?,?,?,?,?)");
    for (uint32_t i : order) {
      const ImportRow& r = rows[i];
      ins.bind(1, r.vni).bind(2, r.overlay_ip).bind(3, r.underlay_ip).bind(4, mac_to_int(r.mac))
          .bind(5, rnics[r.rnic]).run();
    }
    t.commit();
  } catch (...) {
    undo(rows.size());
    throw;
  }
  out.imported = rows.size();
  return out;
}

void Store::save_level2(const std::string& rnic, uint64_t version, uint64_t digest,
                        const std::vector<common::Level2Entry>& puts,
                        const std::vector<common::EntryKey>& dels, bool replace_all) {
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
  ModelResult r = state.check(c);
  if (!r.ok()) return r;
  store.persist(c);
  return state.apply(c);
}

}  // namespace tandem::dpu
