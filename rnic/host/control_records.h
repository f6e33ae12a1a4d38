// The control half's records (ControlServer, the control thread's only):
// sockets, mappings, doorbell bits handed out, PD and CQ reference counts,
// what each object was charged against the fair shares. Internal to the
// control half's files.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "rnic/host/control_server.h"
#include "rnic/host/handles.h"
#include "rnic/host/resource_quota.h"
#include "rnic/host/shm_region.h"

namespace tandem::rnic::host {

struct ControlServer::App {
  uint32_t id = 0;
  uint32_t index = 0;  // in apps_
  int sock = -1;
  uint32_t pid = 0;
  uint32_t uid = 0, gid = 0;  // the peer's, from SO_PEERCRED at accept
  bool cred_known = false;
  char name[32] = {};
  bool hello_done = false;
  uint64_t accepted_ns = 0;  // now_ at accept: a silent connection is closed hello_timeout_ns later
  uint16_t version = 0;
  uint32_t vnic_ip = 0;
  ShmRegion doorbell_memory;
  uint32_t bits = 0;  // doorbell bits handed out so far
  std::vector<uint32_t> free_bits;
  uint32_t qps = 0;
  uint32_t account = TenantQuotas::kNoAccount;  // its vNIC's (set at hello)
  ResourceAmounts used{};                        // what it holds against ServerConfig::limits
  ShmRegion event_memory;  // v2: its asynchronous event ring (kAsyncEvents)
  int event_fd = -1;       // and the eventfd the worker kicks (closed after the lcore let go)
};

struct ControlServer::QpCtl {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t app_index = 0;
  uint32_t doorbell_bit = 0;
  uint32_t pd = 0;
  uint32_t send_cq = 0;
  uint32_t recv_cq = 0;
  uint32_t srq = 0;  // the SRQ it holds a reference on; 0: none
  uint32_t account = TenantQuotas::kNoAccount;
  uint64_t charged_queue_bytes = 0;  // taken from the quotas at create (or the last resize)
  bool timestamps = false;           // its ring has the timestamp array (cq_layout)
  ShmRegion memory;
};

struct ControlServer::CqCtl {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t refs = 0;  // QPs using it
  int event_fd = -1;  // the application's completion channel, or -1 (closed here, after the lcore let go)
  uint32_t app_index = 0;
  uint32_t account = TenantQuotas::kNoAccount;
  uint64_t charged_queue_bytes = 0;  // taken from the quotas at create (or the last resize)
  bool timestamps = false;           // its ring has the timestamp array (cq_layout)
  ShmRegion memory;
};

struct ControlServer::MrCtl {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t pd = 0;
  bool device_mapped = false;  // given to config_.mapper
  uint32_t app_index = 0;
  uint32_t account = TenantQuotas::kNoAccount;
  uint64_t charged_bytes = 0;  // taken from the quotas (the mapping's size)
  ShmRegion memory;
};

struct ControlServer::PdSlot {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t refs = 0;  // MRs and QPs in it
  uint32_t app_index = 0;
  uint32_t account = TenantQuotas::kNoAccount;
};

// A shared receive queue: the mapping, the doorbell bit handed out, and the
// references that decide whether destroy_srq may go.
struct ControlServer::SrqCtl {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t app_index = 0;
  uint32_t pd = 0;
  uint32_t doorbell_bit = 0;
  uint32_t refs = 0;  // QPs created on it
  uint32_t account = TenantQuotas::kNoAccount;
  uint64_t charged_queue_bytes = 0;  // taken from the quotas at create (or the last resize)
  bool timestamps = false;           // its ring has the timestamp array (cq_layout)
  ShmRegion memory;
};

// A free slot of `slots` (reused first), marked used with its next
// generation; UINT32_MAX when `limit` slots are in use.
template <typename Slot>
uint32_t alloc_slot(std::vector<Slot>& slots, std::vector<uint32_t>& free_list, uint32_t limit) {
  uint32_t index;
  if (!free_list.empty()) {
    index = free_list.back();
    free_list.pop_back();
  } else {
    if (slots.size() >= limit) return UINT32_MAX;
    index = static_cast<uint32_t>(slots.size());
    slots.emplace_back();
  }
  Slot& s = slots[index];
  s.used = true;
  s.gen = next_gen(s.gen);
  return index;
}

// The completion channel fd must be an eventfd: a write to anything else
// (a full pipe...) could block the worker. Made non-blocking for the same reason.
inline bool is_eventfd(int fd) noexcept {
  char link[64];
  char target[64];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  if (std::strcmp(target, "anon_inode:[eventfd]") != 0) return false;
  int fl = fcntl(fd, F_GETFL);
  return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

}  // namespace tandem::rnic::host
