// What the host server's two halves share (rnic/host/README.md "Two halves"):
// made by ControlServer, referenced by FastPath. Every field is either a
// one-writer queue or atomic, or behind vnic_mu; nothing else crosses threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "rnic/host/control_msg.h"
#include "rnic/host/queue_layout.h"
#include "rnic/host/resource_quota.h"
#include "rnic/host/server_types.h"
#include "rnic/host/spsc_queue.h"

namespace tandem::rnic::host {

struct HostLink {
  // control -> fast: finished objects; fast -> control: the answers.
  SpscQueue<ControlMsg, 64> to_fast;
  SpscQueue<ControlResult, 64> to_ctl;
  // The latest message whose events the port has consumed too (the fast half
  // publishes it; the control half unmaps what was retired up to it).
  std::atomic<uint64_t> consumed_seq{0};
  // Single-thread mode (HostServer::poll): the control half applies each
  // message at once through this, rather than waiting for an lcore.
  std::function<uint32_t(uint64_t now)> apply_here;
  // The worker page: mapped by the control half, written by the fast half
  // (heartbeat, port state, clock, sleeping).
  WorkerPage* page = nullptr;
  // The eventfd applications kick when the worker announced sleep: made by
  // the control half, drained by the fast half after sleeping (end_idle).
  int wake_fd = -1;
  // The port's vNICs and their owners: set by the lcore (DPU mode), read by
  // the control half at hello.
  std::mutex vnic_mu;
  std::vector<uint32_t> vnic_ips;
  std::vector<VnicOwner> vnic_owners;
  // The control half's counters, read by FastPath::counters() (any thread).
  std::atomic<uint64_t> protocol_errors{0};
  std::atomic<uint64_t> requests_refused{0};
  std::atomic<uint64_t> attach_denied{0};
  std::atomic<uint64_t> silent_timeouts{0};
  std::atomic<uint64_t> silent_evicted{0};
  // The fair shares (atomics any thread may read): taken and given by the control half.
  std::shared_ptr<TenantQuotas> quotas;
};

}  // namespace tandem::rnic::host
