// The control half's messages to HostServer's fast half (rnic/host/README.md
// "Two halves"). Internal to HostServer: host_server.cc and host_server_srq.cc.
#pragma once

#include <cstdint>

#include "rnic/host/host_server.h"
#include "rnic/host/srq_slot.h"

namespace tandem::rnic::host {

enum class MsgKind : uint8_t {
  kAttach, kDetach, kCqCreate, kCqDestroy, kMrRegister, kMrDeregister, kQpCreate, kQpModify, kQpDestroy,
  kQpQuery, kSrqCreate, kSrqDestroy, kSrqModify, kEvents,
};

// One change of the fast half's tables, everything already mapped (and, for
// an MR, already given to the DeviceMapper): applying it is a few stores.
struct ControlMsg {
  MsgKind kind = MsgKind::kAttach;
  bool died = false;          // kDetach
  uint8_t gen = 0;
  uint32_t index = 0;         // QP/CQ/MR/SRQ slot, or the app index (kAttach/kDetach)
  uint32_t app_id = 0;
  uint64_t seq = 0;
  DoorbellPage* doorbells = nullptr;  // kAttach
  RingWriter<Cqe> cq_ring;            // kCqCreate
  CqNotify* notify = nullptr;
  uint64_t* timestamps = nullptr;     // kCqCreate with timestamps
  int event_fd = -1;
  uint32_t pd = 0;                    // kMrRegister
  uint32_t access = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint8_t* base = nullptr;
  uint8_t* map_addr = nullptr;
  uint64_t map_length = 0;
  bool hugetlb = false;
  uint32_t app_index = 0;             // kQpCreate
  uint32_t doorbell_bit = 0;
  QpInfo info{};
  RingReader<SendWqe> sq;
  RingReader<RecvWqe> rq;
  ModifyQpRequest modify{};           // kQpModify
  HostServer::SrqSlot srq;            // kSrqCreate: the finished slot (ring mapped, doorbell bit taken)
  uint32_t limit = 0;                 // kSrqModify (index: the SRQ's slot)
  RingWriter<AsyncEvent> event_ring;  // kEvents (index: the app; event_fd: its eventfd)
  AsyncEventStats* event_stats = nullptr;
};

}  // namespace tandem::rnic::host
