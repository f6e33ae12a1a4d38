// Several lcores per port: the rings that carry a received frame from the
// lcore whose RX queue took it to the lcore owning its QP
// (rnic/port/qp_steering.h). One single-producer single-consumer ring per
// ordered pair of lcores: no lock, no atomic read-modify-write per frame.
#pragma once

#include <rte_ring.h>

#include <array>
#include <cstdint>
#include <string>

#include "rnic/port/qp_steering.h"

namespace tandem::rnic::dpdk {

class SteerRings {
 public:
  static constexpr uint32_t kRingSize = 2048;  // a few bursts of 32 per peer lcore, and slack for a slow one

  // Throws if a ring cannot be made (memory).
  SteerRings(const std::string& name, uint32_t lcores, uint16_t rx_queues);
  ~SteerRings();
  SteerRings(const SteerRings&) = delete;
  SteerRings& operator=(const SteerRings&) = delete;

  const port::QpShards& shards() const noexcept { return shards_; }
  uint32_t lcores() const noexcept { return shards_.lcores(); }
  // The data port's RX queues: lcore k polls queue k if k < rx_queues.
  uint16_t rx_queues() const noexcept { return rx_queues_; }
  rte_ring* ring(uint32_t from, uint32_t to) const noexcept { return rings_[from][to]; }

 private:
  port::QpShards shards_;
  uint16_t rx_queues_;
  std::array<std::array<rte_ring*, port::kMaxLcores>, port::kMaxLcores> rings_{};
};

}  // namespace tandem::rnic::dpdk
