// In-band network telemetry as HPCC (Li et al., SIGCOMM 2019) uses it: each
// switch egress port a data packet leaves stamps one hop record (when it
// left, the port's running byte count, the queue behind it, the port's
// rate); the receiver echoes the records on its ACK and the sender's
// congestion control reads link utilisation from two successive echoes.
// The core never parses INT from the wire; the I/O layer (tandem-sim's
// switches and NICs) carries it and hands the echo to CcPolicy::on_int.
#pragma once

#include <cstdint>

namespace tandem::rnic {

inline constexpr uint32_t kMaxIntHops = 5;  // a 3-tier fat-tree path has 5 switches
// Bytes INT adds to a data packet on the wire (HPCC's header: 5 hops of
// 8 bytes and a 2-byte hop count), so HPCC pays for its telemetry.
inline constexpr uint32_t kIntHeaderBytes = 2 + 8 * kMaxIntHops;

struct IntHop {
  uint64_t ts_ns = 0;       // when the packet left the port
  uint64_t tx_bytes = 0;    // bytes the port had sent before this packet (running count)
  uint32_t qlen_bytes = 0;  // bytes still queued at the port as it left
  double rate_gbps = 0;     // the port's line rate
};

struct IntEcho {
  uint32_t hops = 0;
  IntHop hop[kMaxIntHops];
};

}  // namespace tandem::rnic
