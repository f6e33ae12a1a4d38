// The worker's record of a shared receive queue (HostServer's SRQ table):
// the application's ring, mapped, and who may use it. Internal to HostServer.
#pragma once

#include <cstdint>

#include "rnic/host/host_server.h"

namespace tandem::rnic::host {

struct HostServer::SrqSlot {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t app_index = 0;
  uint32_t pd = 0;
  uint32_t depth = 0;
  uint32_t doorbell_bit = 0;
  uint32_t refs = 0;  // QPs created on it
  ShmRegion memory;
  RingReader<RecvWqe> ring;
};

}  // namespace tandem::rnic::host
