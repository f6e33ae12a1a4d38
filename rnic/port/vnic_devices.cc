#include "rnic/port/vnic_devices.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "common/log/log.h"
#include "rnic/host/device_registry.h"

namespace tandem::rnic::port {

void VnicDevices::sync(const std::vector<Vnic>& vnics) {
  std::string key;
  for (const Vnic& v : vnics)
    key += std::to_string(v.id) + "=" + std::to_string(v.overlay_ip) + "/" +
           std::string(reinterpret_cast<const char*>(v.overlay_mac.data()), 6) + ";";
  if (key == seen_) return;
  seen_ = key;
  std::vector<std::string> next = register_all(vnics);
  for (const std::string& n : names_)
    if (std::find(next.begin(), next.end(), n) == next.end()) host::remove_device(c_.dir, n);
  names_ = std::move(next);
}

void VnicDevices::remove_all() {
  for (const std::string& n : names_) host::remove_device(c_.dir, n);
  names_.clear();
}

std::vector<std::string> VnicDevices::register_all(const std::vector<Vnic>& vnics) const {
  std::vector<std::string> names;
  if (c_.dir.empty()) return names;
  char abs[PATH_MAX];
  const std::string sock = realpath(c_.host_socket.c_str(), abs) ? abs : c_.host_socket;
  for (const Vnic& v : vnics) {
    host::DeviceRecord d;
    d.name = "tandem_" + c_.worker_name + "_v" + std::to_string(v.id);
    d.socket = sock;
    d.vnic_ip = v.overlay_ip;
    d.vnic_id = v.id;
    std::memcpy(d.mac, v.overlay_mac.data(), 6);
    d.mtu = c_.mtu;
    d.max_qps = c_.max_qps;
    d.pid = getpid();
    if (d.name.size() > 63) {
      common::log::error("{}: verbs device name {} is too long (63 bytes at most): not registered", c_.worker_name,
                         d.name);
      continue;
    }
    const std::string err = host::write_device(c_.dir, d);
    if (!err.empty()) {
      common::log::error("{}: verbs device {} not registered: {}", c_.worker_name, d.name, err);
      continue;
    }
    names.push_back(d.name);
  }
  if (!names.empty())
    common::log::info("{}: verbs devices in {}: {} (first {})", c_.worker_name, c_.dir, names.size(), names[0]);
  else if (vnics.empty())
    common::log::info("{}: no vNICs, no verbs devices", c_.worker_name);
  return names;
}

}  // namespace tandem::rnic::port
