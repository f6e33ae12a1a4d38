// Counters of one tandem-rnic worker: one writer (the loop), read by the
// telemetry thread and printed/written as JSON at exit. Every stage that can
// refuse a packet has its own per-DropReason array.
#pragma once

#include <array>
#include <cstdint>

#include "common/wire/drop_reason.h"

namespace tandem::rnic::port {

#define TANDEM_FOREACH_RNIC_COUNTER(X)                                                 \
  X(rx_packets, "frames received from the port")                                       \
  X(rx_bytes, "bytes received")                                                        \
  X(rx_linearized, "multi-segment frames copied to scratch before parsing")            \
  X(rx_accepted, "frames the transport core took")                                     \
  X(tx_packets, "frames handed to the port")                                           \
  X(tx_bytes, "bytes handed to the port")                                              \
  X(tx_backpressure, "bursts the port did not take whole (the rest is retried first)")  \
  X(tx_not_sent, "frames never taken by the port (freed at shutdown)")                 \
  X(tx_retransmits, "frames that were retransmissions")                                \
  X(wqe_send, "send WQEs posted to the core")                                          \
  X(wqe_recv, "receive WQEs posted to the core")                                       \
  X(wqe_refused, "WQEs the core refused (completed with an error)")                    \
  X(cqe_send, "send completions handed to the host interface")                         \
  X(cqe_recv, "receive completions handed to the host interface")                      \
  X(cqe_lost, "completions the host CQ could not take")                                \
  X(qps_created, "QPs created")                                                        \
  X(qps_destroyed, "QPs destroyed (by the application)")                               \
  X(qps_app_died, "QPs freed because their application went away")                    \
  X(qps_no_route, "QPs whose remote GID has no egress entry (moved to ERR)")           \
  X(qps_core_refused, "QPs the core could not create or connect (moved to ERR)")       \
  X(qps_roce_peer, "RC QPs connected over a route to a standard RoCE peer (go-back-N, no Tandem-only headers)") \
  X(srqs_created, "shared receive queues created")                                     \
  X(srqs_core_refused, "SRQs the core could not create (their QPs fail)")              \
  X(mrs_core_refused, "MRs the core could not take (accesses to them fail)")            \
  X(srq_wqe_recv, "SRQ receive WQEs posted to the core")                               \
  X(apps_attached, "applications attached")                                            \
  X(apps_detached, "applications detached")                                            \
  X(link_downs, "times the port's link went down (applications get PORT_ERR)")         \
  X(port_restarts, "port restarts to reconnect a link that stayed down (one lcore)")    \
  X(loop_iterations, "loop iterations")

enum class Stage : uint8_t { kParse, kIngress, kCore, kEgress, kCount };
inline constexpr const char* kStageNames[] = {"parse", "ingress", "core", "egress"};

struct WorkerCounters {
#define TANDEM_RNIC_COUNTER_FIELD(name, doc) uint64_t name = 0;
  TANDEM_FOREACH_RNIC_COUNTER(TANDEM_RNIC_COUNTER_FIELD)
#undef TANDEM_RNIC_COUNTER_FIELD
  std::array<std::array<uint64_t, common::kDropReasonCount>, static_cast<std::size_t>(Stage::kCount)> drops{};

  void drop(Stage s, common::DropReason r) noexcept {
    ++drops[static_cast<std::size_t>(s)][static_cast<std::size_t>(r)];
  }
  uint64_t dropped(Stage s, common::DropReason r) const noexcept {
    return drops[static_cast<std::size_t>(s)][static_cast<std::size_t>(r)];
  }
};

}  // namespace tandem::rnic::port
