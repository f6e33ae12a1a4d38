// What crosses between the worker's data lcore and its connection manager
// (cm_service.h, on a control thread): two in-process SPSC rings of fixed
// records, so the lcore hands a QP1 MAD over with one copy and no system call,
// and sends the CM's MADs as it sends any frame. The lcore also does the
// table lookups the CM needs (a REQ's vNIC and the route back to its sender,
// an address probe): the table's readers are the lcores.
#pragma once

#include <atomic>
#include <cstdint>

#include "rnic/cm/mad.h"
#include "rnic/host/spsc_queue.h"

namespace tandem::rnic::cm {

// lcore -> CM
struct GsiIn {
  enum Kind : uint8_t { kMad, kRoute };
  uint8_t kind = kMad;
  uint8_t has_vni = 0;
  uint16_t pkey = 0;            // the BTH P_Key the sending RNIC stamped
  uint32_t vni = 0;
  uint32_t src_underlay = 0;    // IPv4 source (outer, with VXLAN)
  uint8_t src_mac[6] = {};
  uint16_t reserved = 0;
  uint32_t src_qp = 0;          // DETH source QP
  // kMad, REQ only: the vNIC of this port whose address the REQ's remote GID
  // names (id + 1; 0: none), preferring one of the packet's partition, and
  // where that vNIC's route to the REQ's local GID goes (0: no route).
  uint32_t req_vnic = 0;
  uint32_t req_route_underlay = 0;
  // kRoute: the answer to a probe
  uint32_t probe = 0;
  uint32_t route_underlay = 0;  // 0: no route
  uint8_t mad[kMadLen];
};

// CM -> lcore
struct GsiOut {
  enum Kind : uint8_t { kMad, kReply, kProbe };
  uint8_t kind = kMad;
  uint8_t dst_mac[6] = {};      // kReply
  uint16_t pkey = 0xFFFF;       // BTH P_Key to stamp
  uint32_t vnic_id = 0;         // kMad, kProbe: route from this vNIC's egress entries
  uint32_t remote_ip = 0;       // kMad, kProbe: to this overlay address
  uint32_t dst_underlay = 0;    // kReply: straight back to where a MAD came from
  uint32_t dqpn = kGsiQpn;
  uint32_t probe = 0;           // kProbe: echoed in the kRoute answer
  uint8_t mad[kMadLen];
};

struct GsiRings {
  static constexpr std::size_t kSlots = 512;
  host::SpscQueue<GsiIn, kSlots> in;
  host::SpscQueue<GsiOut, kSlots> out;
  // Written by the lcore only (any thread reads).
  std::atomic<uint64_t> rx_mads{0}, tx_mads{0}, rx_ring_full{0}, tx_no_route{0}, tx_no_buffer{0};
};

}  // namespace tandem::rnic::cm
