// A netdev per Tandem device, for programs that find a RoCE device's IP address
// through its netdev (/sys/class/infiniband/D/device/net/, then `ip addr`):
// rdma-core's test_rdmacm does. make_vnic_netdevs() is called in a fresh network
// namespace (tandem-sysfs --netdev): device i gets a tap `tandem<i>` with its
// vNIC's MAC and IPv4 address (/32), up, and lo comes up. The taps carry no
// traffic (the worker does; librdmacm resolves vNIC addresses itself); the
// namespace, and the taps with it, go when its last process exits. The price:
// the program cannot reach the host's network, loopback included.
#pragma once

#include <string>
#include <vector>

#include "rnic/host/device_registry.h"

namespace tandem::rnic::verbs {

std::string vnic_netdev_name(std::size_t index);  // "tandem0": at most 15 bytes (IFNAMSIZ)

// "" or what failed.
std::string make_vnic_netdevs(const std::vector<host::DeviceRecord>& devs);

}  // namespace tandem::rnic::verbs
