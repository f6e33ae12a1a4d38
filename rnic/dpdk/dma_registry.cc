#include "rnic/dpdk/dma_registry.h"

#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_memory.h>
#include <sys/mman.h>
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

// Whether this port's device takes DMA maps at all, asked once with a probe
// region: a vdev (memif, af_packet, pcap, null) answers ENOTSUP. Then no region
// is made external memory either: rte_extmem_register/unregister of 4 KiB pages
// take the control thread seconds on this VM, for nothing a copying vdev uses.
bool DmaRegistry::device_maps() noexcept {
  if (probed_) return device_maps_;
  probed_ = true;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  rte_device* dev = port_device(port_id_);
  if (p == MAP_FAILED || dev == nullptr) {
    device_maps_ = dev != nullptr;  // no probe possible: register as before
  } else if (rte_extmem_register(p, page, nullptr, 0, page) != 0) {
    device_maps_ = true;
  } else {
    const bool mapped = rte_dev_dma_map(dev, p, reinterpret_cast<uint64_t>(p), page) == 0;
    device_maps_ = mapped || rte_errno != ENOTSUP;
    if (mapped) rte_dev_dma_unmap(dev, p, reinterpret_cast<uint64_t>(p), page);
    rte_extmem_unregister(p, page);
  }
  if (p != MAP_FAILED) munmap(p, page);
  return device_maps_;
}

void DmaRegistry::add(void* map_addr, uint64_t map_len, bool hugetlb) noexcept {
  auto [it, fresh] = maps_.try_emplace(map_addr);
  Entry& e = it->second;
  ++e.refs;
  if (!fresh) return;
  e.len = map_len;
  ++c_.live;
  // IOVA-as-PA mode: the pages' physical addresses are not pinned, nothing can be
  // mapped, and DPDK has no use for the region: it is not registered either.
  if (rte_eal_iova_mode() != RTE_IOVA_VA) {
    ++c_.no_iova;
    return;
  }
  if (!device_maps()) {
    ++c_.not_needed;
    return;
  }
  const uint64_t page = hugetlb ? (2u << 20) : static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // IOVAs unknown (RTE_BAD_IOVA): in IOVA-as-VA mode the device address is
  // the virtual one, which is what rte_dev_dma_map is given below.
  if (rte_extmem_register(map_addr, map_len, nullptr, 0, page) == 0 || rte_errno == EEXIST) {
    e.extmem = true;
  } else {
    ++c_.failed;
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
