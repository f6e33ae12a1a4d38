#include "rnic/dpdk/steer_rings.h"

#include <rte_errno.h>
#include <rte_lcore.h>

#include <stdexcept>

namespace tandem::rnic::dpdk {

SteerRings::SteerRings(const std::string& name, uint32_t lcores, uint16_t rx_queues)
    : shards_(lcores), rx_queues_(rx_queues) {
  if (lcores > port::kMaxLcores) throw std::invalid_argument("at most " + std::to_string(port::kMaxLcores) + " lcores");
  for (uint32_t a = 0; a < lcores; ++a)
    for (uint32_t b = 0; b < lcores; ++b) {
      if (a == b) continue;
      const std::string rn = name + "_st" + std::to_string(a) + std::to_string(b);
      rings_[a][b] = rte_ring_create(rn.c_str(), kRingSize, static_cast<int>(rte_socket_id()),
                                     RING_F_SP_ENQ | RING_F_SC_DEQ);
      if (rings_[a][b] == nullptr)
        throw std::runtime_error("cannot create steering ring " + rn + ": " + rte_strerror(rte_errno));
    }
}

SteerRings::~SteerRings() {
  for (auto& row : rings_)
    for (rte_ring* r : row)
      if (r != nullptr) rte_ring_free(r);
}

}  // namespace tandem::rnic::dpdk
