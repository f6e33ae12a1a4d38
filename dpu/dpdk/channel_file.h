// One RNIC's channel file, agent side: created (or, after an agent restart,
// re-opened) in the channel directory, mapped shared, laid out with
// common/channel and its two rings initialised with rte_ring_init in the
// reserved areas. DPDK types stay out of this header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

struct rte_ring;

namespace tandem::dpu::dpdk {

class ChannelFile {
 public:
  // Re-uses an existing, valid file of the same RNIC (an RNIC worker may have
  // it mapped: truncating it would SIGBUS the worker); else creates it afresh.
  // Throws std::runtime_error on failure.
  ChannelFile(const std::string& path, const std::string& rnic, uint32_t port_id);
  ~ChannelFile();
  ChannelFile(const ChannelFile&) = delete;
  ChannelFile& operator=(const ChannelFile&) = delete;

  void* base() const noexcept { return base_; }
  rte_ring* cmd_ring() const noexcept { return cmd_; }
  rte_ring* evt_ring() const noexcept { return evt_; }
  const std::string& path() const noexcept { return path_; }
  bool reused() const noexcept { return reused_; }

 private:
  std::string path_;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  rte_ring* cmd_ = nullptr;
  rte_ring* evt_ = nullptr;
  bool reused_ = false;
};

}  // namespace tandem::dpu::dpdk
