// A tenant NIC hosted on the port (from the YAML or the DPU agent), and who
// may open its verbs device (--device-owner).
#pragma once

#include <cstdint>

#include "common/channel/messages.h"

namespace tandem::rnic::port {

struct Vnic {
  uint32_t id = 0;
  uint32_t overlay_ip = 0;  // host order
  common::MacAddr overlay_mac{};
  uint32_t vni = 0;
  uint16_t pkey = 0;  // entry P_Key (0x8000 | partition), 0: default partition 0xFFFF
};

// --device-owner VNIC=UID[:GID]: who may open that vNIC's device (rnic/host VnicOwner).
struct DeviceOwner {
  uint32_t vnic_id;
  uint32_t uid;
  int64_t gid = -1;
};

}  // namespace tandem::rnic::port
