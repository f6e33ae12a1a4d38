// A small client of etcd's v3 API over gRPC, generated from etcd's own .proto
// files (dpu/fleet/README.md): ranges at a revision, a watch from a revision
// that reports compaction, transactions, and leases. Blocking calls with a
// deadline; for the fleet thread and tandemctl, never the agent loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::dpu::fleet {

// How to reach etcd. Endpoints: "host:port,host:port" (an http:// or
// https:// in front is accepted and dropped). TLS when cacert is given (and a
// client certificate with cert + key); user + password: etcd's
// authentication (a token on every call).
struct EtcdOptions {
  std::string endpoints = "127.0.0.1:2379";
  std::string cacert, cert, key;
  std::string user, password;
  int timeout_ms = 3000;  // per unary call
  // Authenticate in the constructor (and throw if that fails); false: the
  // first refresh_token() does it (an agent starts while etcd is away).
  bool authenticate_now = true;
};

class EtcdError : public std::runtime_error {
 public:
  EtcdError(const std::string& what, bool compacted = false, int64_t compact_revision = 0)
      : std::runtime_error(what), compacted_(compacted), compact_revision_(compact_revision) {}
  // The revision asked for is older than etcd keeps (compacted away).
  bool compacted() const noexcept { return compacted_; }
  int64_t compact_revision() const noexcept { return compact_revision_; }

 private:
  bool compacted_;
  int64_t compact_revision_;
};

struct KeyValue {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, lease = 0;
};

struct RangeResult {
  int64_t revision = 0;  // the store revision the range was read at
  std::vector<KeyValue> kvs;
};

struct WatchEvent {
  bool deleted = false;
  KeyValue kv;  // for a delete: key and mod_revision only
};

// One condition of a transaction: the key's create or mod revision equals value
// (create_revision == 0: the key does not exist).
struct TxnCompare {
  enum class Target : uint8_t { kCreateRevision, kModRevision };
  std::string key;
  Target target = Target::kModRevision;
  int64_t value = 0;
};
struct TxnOp {
  std::string key;
  std::optional<std::string> value;  // none: delete
  int64_t lease = 0;
};

class EtcdClient {
 public:
  explicit EtcdClient(const EtcdOptions& o);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // Every key under prefix, at `revision` (0: the newest). Throws EtcdError
  // (compacted() if etcd no longer has that revision).
  RangeResult range_prefix(const std::string& prefix, int64_t revision = 0);
  std::optional<KeyValue> get(const std::string& key);
  // The newest mod revision of any key under prefix (0 if none) and the store revision.
  std::pair<int64_t, int64_t> newest_mod_revision(const std::string& prefix);
  int64_t put(const std::string& key, const std::string& value, int64_t lease = 0);  // the new revision
  int64_t del(const std::string& key, bool prefix = false);                           // keys deleted
  // All of `ops` if every compare holds, else nothing: (succeeded, revision).
  std::pair<bool, int64_t> txn(const std::vector<TxnCompare>& cmp, const std::vector<TxnOp>& ops);
  void compact(int64_t revision);

  int64_t lease_grant(int64_t ttl_s);  // the lease id
  int64_t lease_keepalive(int64_t id);  // remaining TTL; <= 0: the lease is gone
  void lease_revoke(int64_t id);

  // Watches every key under prefix from start_revision, calling on_events
  // with each response's events (in revision order) until cancel() or an
  // error: throws EtcdError (compacted() if start_revision is gone).
  // `require_leader`: a member that lost its leader ends the watch rather
  // than going silent.
  void watch_prefix(const std::string& prefix, int64_t start_revision,
                    const std::function<void(std::vector<WatchEvent>&)>& on_events);
  // From another thread: ends a running watch_prefix (it returns normally).
  void cancel();
  // Authenticates again (etcd's tokens expire): after a failed call, before
  // retrying. Nothing to do without a user. Throws EtcdError.
  void refresh_token();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The end of the range that holds exactly the keys starting with prefix.
std::string prefix_end(const std::string& prefix);

}  // namespace tandem::dpu::fleet
