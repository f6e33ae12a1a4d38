// Whether a port can transmit payloads straight from registered application
// memory (external mbufs) or must copy them into DPDK's own mbufs. Zero-copy
// needs whoever reads the frame to reach the application's pages: PMDs that
// copy by virtual address inside this process do; a vhost-user backend (another
// process) maps only DPDK's hugepage segments, and a virtio device in a VM
// reads guest-physical addresses that registered memory has none of.
#pragma once

#include <string>
#include <string_view>

namespace tandem::rnic::dpdk {

struct TxPayloadMode {
  bool zero_copy = false;
  std::string why;  // one line for the start-up message and --stats-json
};

// driver: rte_eth_dev_info::driver_name; iova_va: the EAL runs in IOVA-as-VA
// mode (needed for rte_dev_dma_map of application memory on hardware PMDs).
inline TxPayloadMode choose_tx_payload_mode(std::string_view driver, bool copy_requested,
                                            bool iova_va) {
  auto is = [&](std::initializer_list<std::string_view> names) {
    for (std::string_view n : names)
      if (driver == n) return true;
    return false;
  };
  if (copy_requested) return {false, "--tx-copy"};
  if (is({"net_memif", "net_af_packet", "net_pcap", "net_ring", "net_null", "net_tap", "net_af_xdp",
          "net_vhost"}))
    return {true, std::string(driver) + " copies each frame by virtual address in this process"};
  if (is({"net_virtio_user"}))
    return {false, "net_virtio_user: the vhost-user backend maps only DPDK's hugepage memory, "
                   "not registered application memory"};
  if (is({"net_virtio"}))
    return {false, "net_virtio: the device reads guest-physical addresses, which registered "
                   "application memory does not have"};
  // mlx5 registers any virtual range with the HCA itself; other hardware needs
  // the IOMMU mapping DmaRegistry makes, which IOVA-as-PA mode cannot have.
  if (is({"mlx5_pci", "net_mlx5"}) || iova_va)
    return {true, std::string(driver) + ": registered memory is DMA-mapped for the device"};
  return {false, std::string(driver) + " in IOVA-as-PA mode: registered application memory has no "
                                       "IOVA (run with --iova-mode=va for zero-copy)"};
}

}  // namespace tandem::rnic::dpdk
