// Transport::qp_footprint/srq_footprint, what the host interface charges a
// tenant for its queue depths (queue_bytes), against what create_qp and
// create_srq really take from the heap (mallinfo2's in-use bytes).
#include <catch2/catch.hpp>
#include <malloc.h>

#include <cstdlib>
#include <tuple>

#include "rnic/core/transport.h"

using namespace tandem::rnic;

namespace {

// In-use bytes: arena blocks plus the ones glibc mmaps (large rings).
std::size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// glibc's malloc counts; a sanitizer's allocator does not (mallinfo2 reads zeros).
bool heap_counted() {
  const std::size_t before = heap_in_use();
  void* p = std::malloc(1 << 20);
  const bool counted = heap_in_use() >= before + (1 << 20);
  std::free(p);
  if (!counted) WARN("mallinfo2 does not count this allocator's blocks (sanitizer?): not checked");
  return counted;
}

}  // namespace

TEST_CASE("a QP's footprint is what create_qp allocates, within a few KiB, from 1x1 to 32Kx32K") {
  if (!heap_counted()) return;
  Transport t(TransportConfig{16, 0x100, 64, 4, 1024});
  const uint32_t cq = t.create_cq(64);
  for (const auto& [sq, rq, inl] : {std::tuple{1u, 1u, 0u}, {128u, 512u, 96u}, {32768u, 32768u, 96u}}) {
    QpInitAttr init;
    init.send_cq = cq;
    init.recv_cq = cq;
    init.sq_depth = sq;
    init.rq_depth = rq;
    init.max_inline = inl;
    init.max_dest_rd_atomic = 16;
    const std::size_t before = heap_in_use();
    const uint32_t qpn = t.create_qp(init);
    REQUIRE(qpn != 0);
    const std::size_t used = heap_in_use() - before, charged = Transport::qp_footprint(init);
    INFO(sq << "x" << rq << ": allocated " << used << ", charged " << charged);
    CHECK(charged + 4096 >= used);
    CHECK(used + 4096 >= charged);
    REQUIRE(t.destroy_qp(qpn) == 0);
  }
  QpInitAttr big;
  big.sq_depth = big.rq_depth = 32768;
  big.max_inline = 96;
  CHECK(Transport::qp_footprint(big) > (std::size_t{12} << 20));  // the "~16 MB", charged now
}

TEST_CASE("an SRQ's footprint is what create_srq allocates") {
  if (!heap_counted()) return;
  Transport t(TransportConfig{16, 0x100, 64, 4, 1024});
  for (uint32_t depth : {1u, 1000u, 32768u}) {
    const std::size_t before = heap_in_use();
    const uint32_t srq = t.create_srq(depth);
    REQUIRE(srq != 0);
    const std::size_t used = heap_in_use() - before, charged = Transport::srq_footprint(depth);
    INFO(depth << ": allocated " << used << ", charged " << charged);
    CHECK(charged + 1024 >= used);
    CHECK(used + 1024 >= charged);
    REQUIRE(t.destroy_srq(srq) == 0);
  }
}
