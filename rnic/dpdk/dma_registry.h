// Application memory a NIC may DMA from: every mapping that holds registered
// MRs is made known to DPDK (rte_extmem_register) and mapped for the port's
// device (rte_dev_dma_map), so that zero-copy TX of external mbufs works on
// PMDs that need it (mlx5 registers it with the HCA, VFIO programs the
// IOMMU). Vdevs have no DMA to map (memif, af_packet, null copy or drop), and
// IOVA-as-PA mode has no addresses to map: then nothing is registered (DPDK's
// extmem bookkeeping costs seconds per GiB of 4 KiB pages), only counted. The host interface's control thread
// calls it (host::DeviceMapper) before an MR is visible to the lcore and after
// its grace period; a mapping shared by several MRs is registered once and
// released with its last MR. The counters are atomics: the lcore's telemetry
// snapshot reads them.
#pragma once

#include <atomic>
#include <cstdint>
#include <unordered_map>

#include "rnic/host/server_types.h"

namespace tandem::rnic::dpdk {

struct DmaCounters {
  std::atomic<uint64_t> mapped{0};      // registered, and the device took the DMA map (vdevs
                                        // without DMA of their own accept it as a no-op)
  std::atomic<uint64_t> not_needed{0};  // the device has no DMA map operation (ENOTSUP): not
                                        // registered with DPDK either
  std::atomic<uint64_t> no_iova{0};     // IOVA-as-PA mode: neither registered nor mapped; zero-copy
                                        // TX then gives the NIC no IOVA (run with --iova-mode=va)
  std::atomic<uint64_t> failed{0};      // rte_extmem_register or rte_dev_dma_map failed otherwise
  std::atomic<uint64_t> unmapped{0};
  std::atomic<uint64_t> live{0};        // mappings held now
};

class DmaRegistry final : public host::DeviceMapper {
 public:
  explicit DmaRegistry(uint16_t port_id) noexcept : port_id_(port_id) {}
  ~DmaRegistry();
  DmaRegistry(const DmaRegistry&) = delete;
  DmaRegistry& operator=(const DmaRegistry&) = delete;

  // map_addr/map_len: the page-aligned mapping; hugetlb: 2 MB pages.
  void add(void* map_addr, uint64_t map_len, bool hugetlb) noexcept;
  void remove(void* map_addr) noexcept;
  void map(uint8_t* addr, uint64_t length, bool hugetlb) noexcept override { add(addr, length, hugetlb); }
  void unmap(uint8_t* addr) noexcept override { remove(addr); }
  const DmaCounters& counters() const noexcept { return c_; }

 private:
  struct Entry {
    uint64_t len = 0;
    uint32_t refs = 0;
    bool extmem = false;  // rte_extmem_register succeeded
    bool dma = false;     // rte_dev_dma_map succeeded
  };
  void release(void* addr, const Entry& e) noexcept;
  bool device_maps() noexcept;  // probed once, on the first add

  uint16_t port_id_;
  std::unordered_map<void*, Entry> maps_;
  DmaCounters c_;
  bool probed_ = false;
  bool device_maps_ = true;
};

}  // namespace tandem::rnic::dpdk
