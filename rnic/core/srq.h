// A shared receive queue (ibv_srq) inside the transport core: a pool of
// receive WQEs and the FIFO of those posted. A QP created on an SRQ takes the
// oldest WQE only when a SEND (or WRITE_WITH_IMM) needs one, so a WQE is never
// parked on a QP that receives nothing. Sized at creation; the fast path only
// indexes rings.
#pragma once

#include <cstdint>
#include <vector>

#include "rnic/core/verbs_types.h"

namespace tandem::rnic {

struct RecvWqe;

struct Srq {
  std::vector<RecvWqe> pool;     // every WQE slot
  std::vector<uint32_t> free;    // unused slots (reserved to pool.size(): pushes never allocate)
  std::vector<uint32_t> queue;   // posted slots, oldest at head (power-of-two ring)
  uint32_t mask = 0;
  uint32_t head = 0;
  uint32_t tail = 0;
  uint32_t qps = 0;              // QPs created on it
  uint32_t pd = 0;               // protection domain of the MRs its receives may use
  uint64_t taken = 0;            // WQEs QPs took
  uint64_t empty = 0;            // a message found it empty (the QP sent an RNR NAK)

  uint32_t posted() const noexcept { return tail - head; }
  // The oldest posted WQE, now the caller's.
  bool take(uint32_t& slot) noexcept {
    if (head == tail) {
      ++empty;
      return false;
    }
    slot = queue[head++ & mask];
    ++taken;
    return true;
  }
  // A taken WQE that completed (or was flushed): its slot is free again.
  void release(uint32_t slot) noexcept { free.push_back(slot); }
  // A taken WQE that was not used (its QP was reset or destroyed): back at
  // the front, so the order WQEs are consumed in stays the order of posting.
  void give_back(uint32_t slot) noexcept {
    queue[--head & mask] = slot;
    --taken;
  }
};

}  // namespace tandem::rnic
