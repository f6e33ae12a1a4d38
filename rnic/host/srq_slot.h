// The worker's records of a shared receive queue, one per half of HostServer
// (rnic/host/README.md "Two halves"). Internal to HostServer.
#pragma once

#include <cstdint>

#include "rnic/host/host_server.h"

namespace tandem::rnic::host {

// Control half (the control thread's only): the mapping, the doorbell bit
// handed out, and the references that decide whether destroy_srq may go.
struct HostServer::SrqCtl {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t app_index = 0;
  uint32_t pd = 0;
  uint32_t doorbell_bit = 0;
  uint32_t refs = 0;  // QPs created on it
  uint32_t account = TenantQuotas::kNoAccount;
  uint64_t charged_queue_bytes = 0;  // taken from the quotas at create
  ShmRegion memory;
};

// Fast half (the data lcore's only): what fetch_srq_recv reads. Built by the
// control half over the finished mapping and handed over in one message.
struct HostServer::SrqSlot {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t app_index = 0;
  uint32_t pd = 0;
  uint32_t depth = 0;
  uint32_t doorbell_bit = 0;
  RingReader<RecvWqe> ring;
  uint32_t limit = 0;          // armed SRQ limit (0: none)
  uint8_t pending_events = 0;  // kPendSrqLimit: raised while the ring of events was full
};

}  // namespace tandem::rnic::host
