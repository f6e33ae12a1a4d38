// Brings the agent's level 1 to an etcd revision, sans-I/O (the store is
// SQLite, as for ControlApi): a batch of keys from etcd updates the desired
// state, the plan (fleet_plan.h) says what level 1 must change, each change
// is checked and applied in order, and all of them are persisted with the
// revision in one SQLite transaction. The caller then hands what was applied
// to the RNICs, as for a tandemctl change (AgentHooks::changed).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "dpu/fleet/desired_state.h"
#include "dpu/fleet/fleet_plan.h"
#include "dpu/store/store.h"

namespace tandem::dpu::fleet {

struct FleetEvent {
  std::string key;
  std::optional<std::string> value;  // none: deleted
};

// A full read of the desired state at one revision (snapshot: level 1 is
// brought to it by difference), or the events of one watch response.
struct FleetBatch {
  bool snapshot = false;
  int64_t revision = 0;
  std::vector<FleetEvent> events;
};

// The next batch to apply from a queue: a full read alone, or consecutive
// watch batches joined (up to max_events, at least one batch) so a burst of
// revisions costs one SQLite transaction, at the last one's revision.
FleetBatch next_batch(std::deque<FleetBatch>& q, std::size_t max_events);

struct Applied {
  Change change;
  std::optional<Vnic> removed;  // the vNIC a RemoveVnic took away
};

struct FleetApplyStats {
  uint64_t batches = 0, snapshots = 0, stale_batches = 0;
  uint64_t changes_applied = 0, changes_rejected = 0, unsupported = 0;
  uint64_t resync_changes = 0;  // of changes_applied: made by snapshots (the difference)
  std::string last_error;
};

class FleetApplier {
 public:
  // `revision`: what the store says level 1 was brought to (0: never).
  FleetApplier(std::string server, int64_t revision) : server_(std::move(server)), revision_(revision) {}

  // Throws StoreError if the transaction fails: level 1 is then ahead of
  // disk, and the agent must stop (a restart reloads and resumes from disk).
  std::vector<Applied> apply(const FleetBatch& b, Level1State& s, Store& store);

  int64_t revision() const noexcept { return revision_; }
  const FleetApplyStats& stats() const noexcept { return stats_; }
  const DesiredState& desired() const noexcept { return desired_; }
  const std::string& server() const noexcept { return server_; }

 private:
  std::string server_;
  int64_t revision_;
  DesiredState desired_;
  FleetApplyStats stats_;
};

}  // namespace tandem::dpu::fleet
