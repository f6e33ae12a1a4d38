// The drop-in libibverbs' device and context objects. An ibv_device is one
// registered vNIC; an ibv_context is an attachment (rnic/host open_device) to
// that vNIC's worker, bound to the vNIC. The ibv structs come first so the
// pointers applications hold convert back.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "rnic/host/device_registry.h"
#include "rnic/host/verbs.h"

namespace tandem::rnic::verbs {

struct TandemDevice {
  ibv_device dev;  // first: applications hold &dev
  host::DeviceRecord rec;
  int index = 0;
  int refs = 1;  // the list, plus one per open context
};

struct TandemContext {
  verbs_context v;  // ends with the ibv_context applications hold (verbs_get_ctx)
  host::Context* host = nullptr;
  TandemDevice* dev = nullptr;
  // What an asynchronous event's element names (QPN, CQ and SRQ handles):
  // objects register at creation and leave before they are destroyed.
  std::mutex objs_mu;
  std::unordered_map<uint32_t, ibv_qp*> qps;
  std::unordered_map<uint32_t, ibv_cq*> cqs;
  std::unordered_map<uint32_t, ibv_srq*> srqs;
};

TandemDevice* device_of(ibv_device* d);
TandemContext* context_of(ibv_context* c);
// Points the context's ops (the header's inline post/poll verbs) at rnic/host (objects.cc).
void install_ops(ibv_context& ctx);
// rnic/host's Status (an int) as the errno libibverbs would give.
int errno_of(int status);
// The rnic/host PD behind an application's PD (objects.cc).
host::Pd* host_pd_of(ibv_pd* pd);
// ::ffff:a.b.c.d, the RoCEv2 GID of an IPv4 address (host order).
void gid_of(uint32_t ipv4, ibv_gid* gid);

}  // namespace tandem::rnic::verbs
