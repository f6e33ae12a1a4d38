// One end of a channel ring, for a side that does not trust the other: the
// agent's end of the two rings an RNIC worker can write. The rings are DPDK
// rte_rings in element mode (the worker keeps using rte_ring on them), but
// rte_ring's own functions read the ring's size, mask and the peer's index
// from the shared header on every call, so a worker that scribbles on them
// would make the agent read or write outside the ring. Here the geometry is
// the agent's own copy (RingLayout, taken when it created the ring), the
// agent's index lives in its memory (the shared one is only written), and the
// one value read from the peer, its index, is checked before use: a consumer
// index behind ours by more than the capacity, or a producer index ahead of
// ours by more, is impossible for an honest peer and reported as a fault
// (the caller resets the link); nothing is moved then.
//
// Sans-I/O and without DPDK: the byte offsets of the index fields come from
// the */dpdk code (offsetof on struct rte_ring), so tests run on a plain buffer.
// Single producer, single consumer, 64-byte messages.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/channel/messages.h"

namespace tandem::common {

// Where rte_ring keeps what a side touches, and the ring's geometry.
struct RingLayout {
  uint32_t prod_head = 0, prod_tail = 0;  // byte offsets of the 32-bit indices in the ring header
  uint32_t cons_head = 0, cons_tail = 0;
  uint32_t elems = 0;      // byte offset of element 0
  uint32_t size = 0;       // elements, a power of two
  uint32_t capacity = 0;   // usable (size - 1 for rte_ring without RING_F_EXACT_SZ)
  uint32_t fixed_bytes = 0;  // the header's first bytes that never change after init (name, flags, sizes)

  constexpr uint32_t mask() const noexcept { return size - 1; }
  constexpr std::size_t bytes() const noexcept { return elems + std::size_t{size} * kMessageSize; }
  constexpr bool valid() const noexcept {
    const bool pow2 = size >= 2 && (size & (size - 1)) == 0;
    const uint32_t idx[] = {prod_head, prod_tail, cons_head, cons_tail};
    for (uint32_t o : idx)
      if (o % 4 != 0 || o + 4 > elems) return false;
    return pow2 && capacity >= 1 && capacity < size + 1 && fixed_bytes <= elems;
  }
};

enum class RingFault : uint8_t {
  kNone = 0,
  kPeerIndex,  // the peer's index is impossible (scribbled, or a different ring)
};

namespace ring_detail {
inline uint32_t load(uint8_t* ring, uint32_t off) noexcept {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(ring + off)).load(std::memory_order_acquire);
}
inline void store(uint8_t* ring, uint32_t off, uint32_t v, std::memory_order o) noexcept {
  std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(ring + off)).store(v, o);
}
}  // namespace ring_detail

// The producing end (the agent's command ring).
class RingProducer {
 public:
  RingProducer() = default;
  // `start`: the index the ring is at (0 for a fresh ring; a re-opened one's
  // prod tail, see adopt()).
  RingProducer(uint8_t* ring, const RingLayout& l, uint32_t start = 0) noexcept : ring_(ring), l_(l), prod_(start) {}

  // Takes over a ring someone else produced into (an agent restarted over a
  // live worker's file): our index is the shared tail, if it is possible.
  static bool adopt(uint8_t* ring, const RingLayout& l, RingProducer& out) noexcept {
    const uint32_t p = ring_detail::load(ring, l.prod_tail), c = ring_detail::load(ring, l.cons_tail);
    if (p - c > l.capacity) return false;
    out = RingProducer(ring, l, p);
    return true;
  }

  // Enqueues up to n messages in order; returns how many (0 and fault() set
  // if the consumer's index is impossible).
  uint32_t enqueue(const RawMessage* m, uint32_t n) noexcept {
    if (fault_ != RingFault::kNone) return 0;
    const uint32_t cons = ring_detail::load(ring_, l_.cons_tail);
    const uint32_t used = prod_ - cons;
    if (used > l_.capacity) {
      fault_ = RingFault::kPeerIndex;
      return 0;
    }
    const uint32_t k = n < l_.capacity - used ? n : l_.capacity - used;
    uint8_t* e = ring_ + l_.elems;
    for (uint32_t i = 0; i < k; ++i) std::memcpy(e + std::size_t{(prod_ + i) & l_.mask()} * kMessageSize, &m[i], kMessageSize);
    prod_ += k;
    ring_detail::store(ring_, l_.prod_head, prod_, std::memory_order_relaxed);
    ring_detail::store(ring_, l_.prod_tail, prod_, std::memory_order_release);
    return k;
  }

  RingFault fault() const noexcept { return fault_; }
  uint32_t index() const noexcept { return prod_; }

 private:
  uint8_t* ring_ = nullptr;
  RingLayout l_;
  uint32_t prod_ = 0;
  RingFault fault_ = RingFault::kNone;
};

// The consuming end (the agent's event ring).
class RingConsumer {
 public:
  RingConsumer() = default;
  RingConsumer(uint8_t* ring, const RingLayout& l, uint32_t start = 0) noexcept : ring_(ring), l_(l), cons_(start) {}

  static bool adopt(uint8_t* ring, const RingLayout& l, RingConsumer& out) noexcept {
    const uint32_t p = ring_detail::load(ring, l.prod_tail), c = ring_detail::load(ring, l.cons_tail);
    if (p - c > l.capacity) return false;
    out = RingConsumer(ring, l, c);
    return true;
  }

  // Dequeues up to n messages into `out` (private memory: the copies are the
  // caller's to parse, whatever the peer writes meanwhile). 0 and fault()
  // set if the producer's index is impossible.
  uint32_t dequeue(RawMessage* out, uint32_t n) noexcept {
    if (fault_ != RingFault::kNone) return 0;
    const uint32_t prod = ring_detail::load(ring_, l_.prod_tail);
    const uint32_t avail = prod - cons_;
    if (avail > l_.capacity) {
      fault_ = RingFault::kPeerIndex;
      return 0;
    }
    const uint32_t k = n < avail ? n : avail;
    const uint8_t* e = ring_ + l_.elems;
    for (uint32_t i = 0; i < k; ++i) std::memcpy(&out[i], e + std::size_t{(cons_ + i) & l_.mask()} * kMessageSize, kMessageSize);
    cons_ += k;
    ring_detail::store(ring_, l_.cons_head, cons_, std::memory_order_relaxed);
    ring_detail::store(ring_, l_.cons_tail, cons_, std::memory_order_release);
    return k;
  }

  RingFault fault() const noexcept { return fault_; }
  uint32_t index() const noexcept { return cons_; }

 private:
  uint8_t* ring_ = nullptr;
  RingLayout l_;
  uint32_t cons_ = 0;
  RingFault fault_ = RingFault::kNone;
};

}  // namespace tandem::common
