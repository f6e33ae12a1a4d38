// Per-QP counters of the transport core, read by the I/O layer (telemetry)
// and by tests. Plain integers written by the one thread that drives the core.
#pragma once

#include <array>
#include <cstdint>

#include "common/wire/drop_reason.h"

namespace tandem::rnic {

struct QpCounters {
  uint64_t tx_pkts = 0;         // every packet this QP queued (data, ACK, NAK, READ resp)
  uint64_t tx_bytes = 0;        // data bytes in them
  uint64_t tx_data_pkts = 0;    // requests and READ responses
  uint64_t retx_pkts = 0;
  uint64_t retx_bytes = 0;
  uint64_t rx_pkts = 0;         // accepted by this QP
  uint64_t rx_bytes = 0;
  uint64_t acks_tx = 0;
  uint64_t acks_rx = 0;
  uint64_t sacks_tx = 0;        // SACK packets
  uint64_t sacks_rx = 0;
  uint64_t naks_tx = 0;         // PSN sequence, access, invalid request NAKs
  uint64_t naks_rx = 0;
  uint64_t rnr_naks_tx = 0;
  uint64_t rnr_naks_rx = 0;
  uint64_t timeouts = 0;
  uint64_t credit_probes = 0;   // cc credit: packets sent without credit after an RTO out of it (requester.cc)
  uint64_t ecn_ce_rx = 0;       // data packets that arrived CE-marked
  uint64_t cnp_rx = 0;
  uint64_t cnp_tx = 0;
  uint64_t region_gone = 0;     // WRs failed (LOC_PROT_ERR) because a region they use was deregistered
  uint64_t atomics_executed = 0;   // responder: atomic requests run on registered memory
  uint64_t atomic_replays = 0;     // responder: duplicates answered with the saved value (not run again)
  uint64_t atomic_replay_misses = 0;  // responder: duplicates older than the saved ones (dropped, IBA class D)
  uint32_t reorder_depth_max = 0;  // largest PSN distance ahead of the expected one
  std::array<uint64_t, common::kDropReasonCount> drops{};

  uint64_t drop(common::DropReason r) const noexcept {
    return drops[static_cast<std::size_t>(r)];
  }
};

}  // namespace tandem::rnic
