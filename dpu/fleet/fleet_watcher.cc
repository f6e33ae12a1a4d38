#include "dpu/fleet/fleet_watcher.h"

#include <chrono>

#include "common/log/log.h"
#include "dpu/fleet/desired_state.h"

namespace tandem::dpu::fleet {

FleetWatcher::FleetWatcher(FleetConfig c, int64_t resume_revision)
    : c_(std::move(c)), received_revision_(resume_revision) {
  c_.etcd.authenticate_now = false;  // etcd may be away at start: the threads authenticate and retry
  watch_client_ = std::make_unique<EtcdClient>(c_.etcd);  // bad TLS files etc. fail here, at start-up
  watch_thread_ = std::thread([this] { watch_loop(); });
  status_thread_ = std::thread([this] { status_loop(); });
}

FleetWatcher::~FleetWatcher() {
  stop_ = true;
  cv_.notify_all();
  watch_client_->cancel();
  watch_thread_.join();
  status_thread_.join();
}

bool FleetWatcher::sleep_for_ms(int ms) {
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait_for(g, std::chrono::milliseconds(ms), [&] { return stop_.load(); });
  return !stop_;
}

void FleetWatcher::failed(const char* where, const std::exception& e) {
  ++errors_;
  std::lock_guard<std::mutex> g(err_mu_);
  if (connected_.exchange(false) || last_error_.empty())  // once per outage, not once per retry
    common::log::warn("fleet: etcd unreachable ({}: {}); serving with what we have, retrying", where, e.what());
  last_error_ = std::string(where) + ": " + e.what();
}

void FleetWatcher::reconnected() {
  if (!connected_.exchange(true)) common::log::info("fleet: etcd reachable");
}

void FleetWatcher::watch_loop() {
  const std::string prefix(kDesiredPrefix);
  bool have_view = false;  // the agent holds the desired state as of received_revision_
  bool authenticated = c_.etcd.user.empty();
  int backoff = 100;
  while (!stop_) {
    try {
      if (!authenticated) {
        watch_client_->refresh_token();
        authenticated = true;
      }
      if (!have_view) {
        // Level 1 was brought to received_revision_: read the desired state as
        // it was then (nothing to change, unless a crash came between disk and
        // RNICs); if etcd has compacted past it, read it now and let the
        // difference be applied.
        RangeResult r;
        try {
          r = watch_client_->range_prefix(prefix, received_revision_);
        } catch (const EtcdError& e) {
          if (!e.compacted()) throw;
          ++compactions_;
          common::log::warn("fleet: revision {} is compacted: reading the desired state whole", received_revision_);
          r = watch_client_->range_prefix(prefix, 0);
        }
        FleetBatch b{true, r.revision, {}};
        b.events.reserve(r.kvs.size());
        for (KeyValue& kv : r.kvs) b.events.push_back(FleetEvent{std::move(kv.key), std::move(kv.value)});
        {
          std::lock_guard<std::mutex> g(mu_);
          queue_.push_back(std::move(b));
        }
        ++reads_;
        received_revision_ = r.revision;
        have_view = true;
        reconnected();
      }
      watch_client_->watch_prefix(prefix, received_revision_ + 1, [&](std::vector<WatchEvent>& evs) {
        reconnected();
        backoff = 100;
        // One batch per revision: the applier records each revision it reaches.
        std::lock_guard<std::mutex> g(mu_);
        for (WatchEvent& e : evs) {
          const int64_t rev = e.kv.mod_revision;
          if (queue_.empty() || queue_.back().snapshot || queue_.back().revision != rev)
            queue_.push_back(FleetBatch{false, rev, {}});
          queue_.back().events.push_back(FleetEvent{std::move(e.kv.key),
                                                    e.deleted ? std::nullopt : std::optional(std::move(e.kv.value))});
          received_revision_ = rev;
          ++events_;
        }
      });
    } catch (const EtcdError& e) {
      if (e.compacted()) {  // fell behind a compaction while connected: read whole again
        ++compactions_;
        have_view = false;
        continue;
      }
      failed("watch", e);
    } catch (const std::exception& e) {
      failed("watch", e);
    }
    if (!sleep_for_ms(backoff)) break;
    backoff = std::min(backoff * 2, 2000);
    authenticated = false;  // the failure may have been an expired token
  }
}

void FleetWatcher::status_loop() {
  std::unique_ptr<EtcdClient> client;
  uint64_t written_seq = 0;
  auto last_keepalive = std::chrono::steady_clock::time_point{};
  while (!stop_) {
    try {
      if (!client) {
        client = std::make_unique<EtcdClient>(c_.etcd);
        client->refresh_token();
      }
      if (lease_id_ == 0) {
        lease_id_ = client->lease_grant(c_.lease_ttl_s);
        ++lease_grants_;
        written_seq = 0;  // the new lease needs the key again
      }
      auto now = std::chrono::steady_clock::now();
      if (now - last_keepalive >= std::chrono::seconds(1)) {
        if (client->lease_keepalive(lease_id_) <= 0) {
          lease_id_ = 0;  // expired while we could not reach etcd: a new one
          continue;
        }
        last_keepalive = now;
      }
      nlohmann::json st;
      uint64_t seq;
      {
        std::lock_guard<std::mutex> g(mu_);
        st = status_;
        seq = status_seq_;
      }
      if (seq != written_seq && !st.is_null()) {
        st["etcd"] = stats();
        client->put(status_key(c_.server), st.dump(), lease_id_);
        ++status_writes_;
        written_seq = seq;
      }
    } catch (const std::exception& e) {
      failed("status", e);
      client.reset();  // a new connection and token next time
      if (!sleep_for_ms(500)) break;
      continue;
    }
    if (!sleep_for_ms(100)) break;
  }
  if (client && lease_id_ != 0) {
    try {
      client->lease_revoke(lease_id_);  // a clean stop: the status goes at once
    } catch (const std::exception&) {
    }
  }
}

void FleetWatcher::take(std::deque<FleetBatch>& out) {
  std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
  if (!g.owns_lock() || queue_.empty()) return;  // the watch thread is queueing: next iteration
  for (FleetBatch& b : queue_) out.push_back(std::move(b));
  queue_.clear();
}

void FleetWatcher::publish_status(nlohmann::json status) {
  std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
  if (!g.owns_lock()) return;  // next time
  if (status == status_) return;
  status_ = std::move(status);
  ++status_seq_;
}

nlohmann::json FleetWatcher::stats() const {
  std::string err;
  {
    std::lock_guard<std::mutex> g(err_mu_);
    err = last_error_;
  }
  return {{"connected", connected_.load()}, {"errors", errors_.load()},     {"compactions", compactions_.load()},
          {"full_reads", reads_.load()},    {"events", events_.load()},     {"status_writes", status_writes_.load()},
          {"lease_grants", lease_grants_.load()}, {"lease", lease_id_.load()}, {"last_error", err}};
}

}  // namespace tandem::dpu::fleet
