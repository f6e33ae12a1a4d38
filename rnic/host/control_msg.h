// The control half's messages to the fast half, and the fast half's answer
// (rnic/host/README.md "Two halves"): ControlServer builds and sends them
// (control thread), FastPath applies them (data lcore). Internal to rnic/host.
#pragma once

#include <cstdint>

#include "rnic/host/fast_records.h"
#include "rnic/host/host_protocol.h"
#include "rnic/host/server_types.h"

namespace tandem::rnic::host {

enum class MsgKind : uint8_t {
  kAttach, kDetach, kCqCreate, kCqDestroy, kCqResize, kMrRegister, kMrDeregister, kMrReregister, kQpCreate, kQpModify, kQpDestroy,
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
  RingWriter<Cqe> cq_ring;            // kCqCreate, kCqResize (the new ring)
  CqNotify* notify = nullptr;
  uint64_t* timestamps = nullptr;     // kCqCreate with timestamps
  int event_fd = -1;
  uint32_t pd = 0;                    // kMrRegister, kMrReregister
  uint32_t rereg_flags = 0;           // kMrReregister: kReregPd | kReregAccess
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
  FastPath::SrqSlot srq;              // kSrqCreate: the finished slot (ring mapped, doorbell bit taken)
  uint32_t limit = 0;                 // kSrqModify (index: the SRQ's slot)
  RingWriter<AsyncEvent> event_ring;  // kEvents (index: the app; event_fd: its eventfd)
  AsyncEventStats* event_stats = nullptr;
};

// The fast half's answer to one message.
struct ControlResult {
  uint64_t seq = 0;
  uint32_t status = 0;      // Status of a modify_qp or CQ resize the fast half validated
  ibv_qp_state state = IBV_QPS_RESET;
  uint64_t applied_ns = 0;  // the lcore's `now` when it applied the message
};

}  // namespace tandem::rnic::host
