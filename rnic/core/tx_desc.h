// What the transport core asks the I/O layer to send: one descriptor per
// packet, transport headers as fields, payload by reference into registered
// memory (zero copy), and a fixed-capacity queue of them that the I/O layer
// drains.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/wire/headers.h"
#include "rnic/core/irn_wire.h"
#include "rnic/core/verbs_types.h"

namespace tandem::rnic {

// An atomic request's AtomicETH operands (VA and R_Key travel in the RETH fields).
struct AtomicArgs {
  uint64_t swap_add;  // CMP_SWAP: the value swapped in; FETCH_ADD: the addend
  uint64_t compare;   // CMP_SWAP: the value compared with (FETCH_ADD: 0)
};

// `lkey`: the registered region the bytes lie in (0: the core's own, e.g.
// inline data): a zero-copy I/O layer holds that region's pages while the
// NIC still reads them (rnic/dpdk/tx_encap.h).
struct TxSeg {
  const uint8_t* data = nullptr;
  uint32_t len = 0;
  uint32_t lkey = 0;
};

// Laid out so that a data packet or an ACK touches two cache lines: the BTH,
// addressing, lengths and RETH in the first, XETH/AETH/SACK/ImmDt and the first
// payload segment in the second (the core fills a whole TX queue of these
// before the I/O layer reads them back).
struct alignas(64) TxDesc {
  // Transport headers; which of reth/aeth/imm/atomic_ack are sent follows
  // from bth.opcode (common::opcode_has). bth.pad is left for the writer.
  common::Bth bth;

  uint32_t local_qpn = 0;
  uint32_t remote_qpn = 0;   // == bth.dqpn
  uint32_t peer = 0;         // QpAttr::peer of the sending QP
  // Payload: the concatenation of segs[0..num_segs). Pointers stay valid
  // until the memory region they point into is deregistered.
  uint32_t payload_len = 0;  // data bytes, without the XETH
  uint32_t num_segs = 0;
  uint16_t udp_sport = 0;    // path chosen (RoCEv2 entropy port)
  bool retransmit = false;   // for traces and counters only
  bool has_xeth = false;     // IRN placement header precedes the payload
  // A packet has a RETH or (UD) a DETH, never both: they share the bytes.
  // DETH: Q_Key and source QPN (the core's; the I/O layer renumbers it).
  union {
    common::Reth reth{};
    common::Deth deth;
  };

  // An atomic request (no XETH: it is placed whole) carries its operands
  // where the XETH would be; its VA and R_Key are reth.va and reth.rkey.
  union {
    Xeth xeth{};
    AtomicArgs atomic;
  };
  common::Aeth aeth;
  uint64_t atomic_ack = 0;   // RC_ATOMIC_ACKNOWLEDGE: the original value, or a SACK (irn_wire.h)
  uint32_t imm = 0;          // host order
  std::array<TxSeg, kMaxSge> segs{};

  // Bytes after the BTH payload boundary that the receiver will see as
  // payload: XETH (if any) + data.
  uint32_t wire_payload_len() const noexcept {
    return payload_len + (has_xeth ? kXethLen : 0);
  }
};
static_assert(offsetof(TxDesc, reth) + sizeof(common::Reth) <= 64 &&
                  offsetof(TxDesc, segs) + sizeof(TxSeg) <= 128,
              "a descriptor's headers and first segment span two cache lines");

// Single-producer (the core) single-consumer (the I/O layer, same thread)
// ring of descriptors. Capacity is a power of two fixed at construction.
class TxQueue {
 public:
  explicit TxQueue(uint32_t capacity_pow2);

  bool empty() const noexcept { return head_ == tail_; }
  bool full() const noexcept { return tail_ - head_ == cap_; }
  uint32_t size() const noexcept { return tail_ - head_; }
  uint32_t capacity() const noexcept { return cap_; }

  // Oldest descriptor; only valid when !empty().
  const TxDesc& front() const noexcept { return ring_[head_ & mask_]; }
  void pop() noexcept { ++head_; }
  // Copies out up to `n` descriptors, oldest first; returns how many.
  uint32_t pop_burst(TxDesc* out, uint32_t n) noexcept;

  // Marks every queued descriptor whose payload lies in region `lkey` as
  // dropped (its region was deregistered): the I/O layer sends nothing of it.
  uint32_t drop_region(uint32_t lkey) noexcept;
  // A descriptor drop_region marked (local_qpn 0: no QP has that number).
  static bool dropped(const TxDesc& d) noexcept { return d.local_qpn == 0; }

  // Core side: a slot to fill, or nullptr when full; commit() publishes it.
  // An empty queue starts again at slot 0, so a receiver's one ACK per burst
  // reuses a cached descriptor instead of a cold one further round the ring.
  TxDesc* reserve() noexcept {
    if (head_ == tail_) head_ = tail_ = 0;
    return full() ? nullptr : &ring_[tail_ & mask_];
  }
  void commit() noexcept { ++tail_; }

 private:
  uint32_t cap_;
  uint32_t mask_;
  uint32_t head_ = 0;
  uint32_t tail_ = 0;
  std::vector<TxDesc> ring_;  // sized once
};

}  // namespace tandem::rnic
