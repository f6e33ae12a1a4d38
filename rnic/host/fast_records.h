// The fast half's records (FastPath, the data lcore's only): what ready_qps,
// fetch_*, complete_* and the events read and write. The control half builds
// them over finished mappings and sends them in ControlMsgs (control_msg.h);
// FastPath stores them. Internal to rnic/host and the port's WQE sinks.
#pragma once

#include <cstdint>
#include <vector>

#include "rnic/host/fast_path.h"
#include "rnic/host/queue_layout.h"
#include "rnic/host/spsc_ring.h"

namespace tandem::rnic::host {

struct FastPath::FastApp {
  uint32_t id = 0;
  DoorbellPage* doorbells = nullptr;
  std::vector<uint32_t> qpn_by_bit;  // doorbell bit -> QPN (0: free)
  RingWriter<AsyncEvent> events;     // v2: its asynchronous event ring (depth 0: none)
  AsyncEventStats* event_stats = nullptr;
  int event_fd = -1;
  uint32_t deferred = 0;             // events pending on its objects (their pending_events bits)
  uint8_t pending_port = 0;          // kPendPort: the port's state changed while its ring was full
};

struct FastPath::QpSlot {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_index = 0;
  uint32_t doorbell_bit = 0;
  QpInfo info{};
  RingReader<SendWqe> sq;
  RingReader<RecvWqe> rq;
  uint8_t pending_events = 0;  // kPendQpFatal | kPendLastWqe: raised while its application's ring was full
};

struct FastPath::CqSlot {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t app_index = 0;
  uint8_t pending_events = 0;  // kPendCqErr: raised while its application's ring was full
  RingWriter<Cqe> ring;
  CqNotify* notify = nullptr;
  uint64_t* timestamps = nullptr;  // v2 CQs with timestamps: beside the ring, one per slot
  int event_fd = -1;
  bool overrun = false;  // a completion found it full: in error, takes nothing more
};

struct FastPath::MrSlot {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t pd = 0;
  uint32_t access = 0;
  uint64_t addr = 0;  // application virtual address (what peers put in RETH)
  uint64_t length = 0;
  uint8_t* base = nullptr;  // worker address of addr
};

// A shared receive queue: what fetch_srq_recv reads. Built whole by the
// control half over the finished mapping and handed over in one message.
struct FastPath::SrqSlot {
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

// Which events an object keeps pending while its application's ring is full.
inline constexpr uint8_t kPendQpFatal = 1;
inline constexpr uint8_t kPendLastWqe = 2;
inline constexpr uint8_t kPendCqErr = 1;
inline constexpr uint8_t kPendSrqLimit = 1;
inline constexpr uint8_t kPendPort = 1;

// vendor_err values of error completions written by the server.
inline constexpr uint32_t kVendorBadLkey = 1;
inline constexpr uint32_t kVendorOutOfBounds = 2;
inline constexpr uint32_t kVendorBadWqe = 3;

}  // namespace tandem::rnic::host
