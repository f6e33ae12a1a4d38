// The port's vNICs as verbs devices (rnic/host/device_registry.h): one record
// per vNIC in the run directory, so libibverbs applications find them. File
// I/O: called at start and from a thread of the worker's (DPU mode: every
// 100 ms, following the agent's vNICs), never from the data lcore.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rnic/port/vnic.h"

namespace tandem::rnic::port {

struct VnicDeviceConfig {
  std::string dir;          // "" = register nothing
  std::string worker_name;  // devices are tandem_<worker>_v<vnic id>
  std::string host_socket;  // where the devices' applications attach
  uint32_t mtu = 1024;
  uint32_t max_qps = 0;
};

class VnicDevices {
 public:
  explicit VnicDevices(VnicDeviceConfig c) : c_(std::move(c)) {}
  // Registers a device per vNIC if the list changed since the last call, and
  // removes the devices of vNICs that are gone.
  void sync(const std::vector<Vnic>& vnics);
  // Removes every device registered (the worker stops).
  void remove_all();
  const std::vector<std::string>& names() const noexcept { return names_; }

 private:
  std::vector<std::string> register_all(const std::vector<Vnic>& vnics) const;

  VnicDeviceConfig c_;
  std::vector<std::string> names_;
  std::string seen_ = "-";  // the vNIC list last registered (never a real list's key)
};

}  // namespace tandem::rnic::port
