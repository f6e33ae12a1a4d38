// The libibverbs helpers that need no device: names of enums, rate
// conversions, fork support.
#include <infiniband/verbs.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "rnic/host/shm_region.h"

extern "C" {

const char* ibv_node_type_str(ibv_node_type t) {
  switch (t) {
    case IBV_NODE_CA: return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH: return "InfiniBand switch";
    case IBV_NODE_ROUTER: return "InfiniBand router";
    case IBV_NODE_RNIC: return "iWARP NIC";
    case IBV_NODE_USNIC: return "usNIC";
    case IBV_NODE_USNIC_UDP: return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED: return "unspecified";
    default: return "unknown";
  }
}

const char* ibv_port_state_str(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP: return "PORT_NOP";
    case IBV_PORT_DOWN: return "PORT_DOWN";
    case IBV_PORT_INIT: return "PORT_INIT";
    case IBV_PORT_ARMED: return "PORT_ARMED";
    case IBV_PORT_ACTIVE: return "PORT_ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "PORT_ACTIVE_DEFER";
    default: return "invalid state";
  }
}

const char* ibv_event_type_str(ibv_event_type e) {
  static const char* const kNames[] = {
      "CQ error", "local work queue catastrophic error", "invalid request local work queue error",
      "local access violation work queue error", "communication established", "send queue drained",
      "path migrated", "path migration request error", "local catastrophic error", "port active",
      "port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error", "SRQ limit reached",
      "last WQE reached", "client reregistration", "GID table change", "WQ fatal"};
  const auto i = static_cast<unsigned>(e);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : (e == IBV_EVENT_DEVICE_FATAL ? "device fatal" : "unknown");
}

const char* ibv_wc_status_str(ibv_wc_status s) {
  static const char* const kNames[] = {
      "success", "local length error", "local QP operation error", "local EE context operation error",
      "local protection error", "Work Request Flushed Error", "memory management operation error",
      "bad response error", "local access error", "remote invalid request error", "remote access error",
      "remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
      "local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
      "invalid EE context state", "fatal error", "response timeout error", "general error",
      "TM error", "TM Rendezvous Request Tag Error"};
  const auto i = static_cast<unsigned>(s);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "unknown";
}

namespace {
// (rate, multiple of 2.5 Gb/s, Mb/s), as rdma-core lists them.
struct Rate {
  ibv_rate rate;
  int mult;
  int mbps;
};
constexpr Rate kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},       {IBV_RATE_10_GBPS, 4, 10000},
    {IBV_RATE_20_GBPS, 8, 20000},     {IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},    {IBV_RATE_120_GBPS, 48, 120000},
    {IBV_RATE_14_GBPS, 5, 14062},     {IBV_RATE_56_GBPS, 22, 56250},    {IBV_RATE_112_GBPS, 45, 112500},
    {IBV_RATE_168_GBPS, 67, 168750},  {IBV_RATE_25_GBPS, 10, 25781},    {IBV_RATE_100_GBPS, 40, 103125},
    {IBV_RATE_200_GBPS, 80, 206250},  {IBV_RATE_300_GBPS, 120, 309375}, {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},    {IBV_RATE_400_GBPS, 160, 425000}, {IBV_RATE_600_GBPS, 240, 637500},
};
}  // namespace

int ibv_rate_to_mult(ibv_rate rate) {
  for (const Rate& r : kRates)
    if (r.rate == rate) return r.mult;
  return -1;
}

ibv_rate mult_to_ibv_rate(int mult) {
  for (const Rate& r : kRates)
    if (r.mult == mult) return r.rate;
  return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(ibv_rate rate) {
  for (const Rate& r : kRates)
    if (r.rate == rate) return r.mbps;
  return -1;
}

ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const Rate& r : kRates)
    if (r.mbps == mbps) return r.rate;
  return IBV_RATE_MAX;
}

// Registered memory is shared with the worker through MAP_SHARED memfds, so a
// fork never takes the parent's pages from the worker (the hazard rdma-core's
// fork support guards against); but a child would share them rather than
// copy them. ibv_fork_init does what rdma-core's does: from then on registered
// buffers (and the queues) are MADV_DONTFORK, absent from children.
int ibv_fork_init(void) {
  tandem::rnic::host::ShmRegion::protect_from_fork();
  return 0;
}

// Whole pages around [base, base + size), as rdma-core's; 0 or an errno value.
static int fork_range(void* base, size_t size, int advice) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<uintptr_t>(base) & ~(page - 1);
  const auto hi = (reinterpret_cast<uintptr_t>(base) + size + page - 1) & ~(page - 1);
  return madvise(reinterpret_cast<void*>(lo), hi - lo, advice) == 0 ? 0 : errno;
}
int ibv_dontfork_range(void* base, size_t size) { return fork_range(base, size, MADV_DONTFORK); }
int ibv_dofork_range(void* base, size_t size) { return fork_range(base, size, MADV_DOFORK); }

ibv_fork_status ibv_is_fork_initialized(void) {
  return tandem::rnic::host::ShmRegion::fork_protected() ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

}  // extern "C"
