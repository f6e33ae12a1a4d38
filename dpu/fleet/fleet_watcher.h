// The agent's etcd side, on threads of its own so no etcd call runs in the
// agent loop (which drives the RNIC channels): one thread reads the desired
// state (at the stored revision, or whole again after a compaction) and
// watches it, queueing batches in revision order; another keeps this server's
// status key alive under a lease. The loop takes batches with take() and
// hands its status in with publish_status(), both without waiting on I/O.
// etcd unreachable: the agent serves with what it has, the threads retry
// (counted, logged once per outage) and catch up from where they were.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "dpu/fleet/etcd_client.h"
#include "dpu/fleet/fleet_apply.h"

namespace tandem::dpu::fleet {

struct FleetConfig {
  EtcdOptions etcd;
  std::string server;     // this agent's server name (its slice of the desired state)
  int64_t lease_ttl_s = 5;  // a dead agent's status disappears this long after
};

class FleetWatcher {
 public:
  // resume_revision: the revision level 1 was brought to (0: read it all).
  FleetWatcher(FleetConfig c, int64_t resume_revision);
  ~FleetWatcher();  // stops both threads; revokes the status lease if it can
  FleetWatcher(const FleetWatcher&) = delete;
  FleetWatcher& operator=(const FleetWatcher&) = delete;

  // Agent loop: batches received since the last call, in revision order.
  void take(std::deque<FleetBatch>& out);
  // Agent loop: this server's status (JSON), written to etcd by the status thread.
  void publish_status(nlohmann::json status);
  // Counters for the status and tandemctl: connected, errors, compactions, ...
  nlohmann::json stats() const;

 private:
  void watch_loop();
  void status_loop();
  bool sleep_for_ms(int ms);  // false: stopping
  void failed(const char* where, const std::exception& e);
  void reconnected();

  FleetConfig c_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<FleetBatch> queue_;
  nlohmann::json status_;
  uint64_t status_seq_ = 0;
  std::unique_ptr<EtcdClient> watch_client_;  // owned by the watch thread once started
  int64_t received_revision_;
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> errors_{0}, compactions_{0}, reads_{0}, events_{0}, status_writes_{0}, lease_grants_{0};
  std::atomic<int64_t> lease_id_{0};
  mutable std::mutex err_mu_;
  std::string last_error_;
  std::thread watch_thread_, status_thread_;
};

}  // namespace tandem::dpu::fleet
