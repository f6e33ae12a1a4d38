// A receiver fed a recorded stream of another pair's frames (rx_burst_test,
// icrc_deferred_test): its region and QP take the recorded responder's address,
// key and QPN, so the same frames place the same bytes.
#pragma once
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tests/unit/core/loop.h"

namespace tandem::rnic::test {

template <std::size_t kBytes>
struct ReplayRx {
  Transport t;
  std::vector<uint8_t> mem = std::vector<uint8_t>(kBytes);
  uint32_t cq = 0;
  uint32_t qpn = 0;
};

template <std::size_t kBytes>
void make_rx(ReplayRx<kBytes>& r, const Host& like, const QpSetup& s, uint32_t remote_qpn) {
  r.cq = r.t.create_cq(1 << 14);
  const MemoryRegion mr = r.t.reg_mr(like.mr.addr, r.mem.data(), r.mem.size(),
                                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  REQUIRE(mr.rkey == like.mr.rkey);
  r.qpn = r.t.create_qp(qp_init(s, r.cq));
  REQUIRE(r.qpn == like.qpn);
  REQUIRE(bring_up(r.t, r.qpn, remote_qpn, s.sq_psn_b, s.sq_psn_a, s, 1) == 0);
}

}  // namespace tandem::rnic::test
