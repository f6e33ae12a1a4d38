#include "rnic/dpdk/dma_registry.h"

#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_memory.h>
#include <unistd.h>

namespace tandem::rnic::dpdk {

namespace {

rte_device* port_device(uint16_t port_id) noexcept {
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(port_id, &info) != 0) return nullptr;
  return info.device;
}

}  // namespace

DmaRegistry::~DmaRegistry() {
  for (const auto& [addr, e] : maps_) release(addr, e);
}

void DmaRegistry::add(void* map_addr, uint64_t map_len, bool hugetlb) noexcept {
  auto [it, fresh] = maps_.try_emplace(map_addr);
  Entry& e = it->second;
  ++e.refs;
  if (!fresh) return;
  e.len = map_len;
  ++c_.live;
  const uint64_t page = hugetlb ? (2u << 20) : static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // IOVAs unknown (RTE_BAD_IOVA): in IOVA-as-VA mode the device address is
  // the virtual one, which is what rte_dev_dma_map is given below.
  if (rte_extmem_register(map_addr, map_len, nullptr, 0, page) == 0 || rte_errno == EEXIST) {
    e.extmem = true;
  } else {
    ++c_.failed;
    return;
  }
  if (rte_eal_iova_mode() != RTE_IOVA_VA) {
    ++c_.no_iova;  // the pages' physical addresses are not pinned: no DMA map
    return;
  }
  rte_device* dev = port_device(port_id_);
  if (dev != nullptr &&
      rte_dev_dma_map(dev, map_addr, reinterpret_cast<uint64_t>(map_addr), map_len) == 0) {
    e.dma = true;
    ++c_.mapped;
  } else if (rte_errno == ENOTSUP || dev == nullptr) {
    ++c_.not_needed;
  } else {
    ++c_.failed;
  }
}

void DmaRegistry::remove(void* map_addr) noexcept {
  auto it = maps_.find(map_addr);
  if (it == maps_.end() || --it->second.refs > 0) return;
  release(it->first, it->second);
  maps_.erase(it);
}

void DmaRegistry::release(void* addr, const Entry& e) noexcept {
  if (e.dma) {
    if (rte_device* dev = port_device(port_id_))
      rte_dev_dma_unmap(dev, addr, reinterpret_cast<uint64_t>(addr), e.len);
  }
  if (e.extmem) rte_extmem_unregister(addr, e.len);
  ++c_.unmapped;
  --c_.live;
}

}  // namespace tandem::rnic::dpdk
