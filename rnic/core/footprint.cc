// What a QP and an SRQ cost in worker memory, computed from the same sizes
// create_qp and create_srq allocate (transport.cc, srq.cc), so a tenant can be
// charged for its queue depths before the core is asked (rnic/host's
// queue_bytes share). tests/unit/core/footprint_test.cc holds it to the heap.
#include <bit>

#include "rnic/core/qp.h"
#include "rnic/core/srq.h"

namespace tandem::rnic {

namespace {

// The path and CC policies and the allocator's per-block overhead: a few
// hundred bytes whatever the depths.
constexpr std::size_t kPolicyAllowance = 1024;

}  // namespace

std::size_t Transport::qp_footprint(const QpInitAttr& init) noexcept {
  const std::size_t sq = std::bit_ceil(std::max<uint32_t>(init.sq_depth, 1));
  const std::size_t w = init.window_pkts;
  std::size_t bytes = sizeof(Qp) + kPolicyAllowance;
  bytes += sq * (sizeof(SendWqe) + init.max_inline);
  bytes += init.srq != 0 ? w * sizeof(uint32_t) : std::size_t{init.rq_depth} * sizeof(RecvWqe);
  bytes += w * (sizeof(PsnRec) + sizeof(RxSlot));
  bytes += std::size_t{init.max_dest_rd_atomic} * sizeof(ReadJob);
  return bytes;
}

std::size_t Transport::srq_footprint(uint32_t capacity) noexcept {
  const std::size_t ring = std::bit_ceil(std::max<uint32_t>(capacity, 1));
  return sizeof(Srq) + std::size_t{capacity} * (sizeof(RecvWqe) + sizeof(uint32_t)) + ring * sizeof(uint32_t);
}

}  // namespace tandem::rnic
