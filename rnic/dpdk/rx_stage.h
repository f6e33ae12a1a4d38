// The receive passes (rnic/port/rx_stage.h) over DPDK mbufs: the worker's
// RX and the rx-pipeline benchmark use this instantiation.
#pragma once

#include <rte_mbuf.h>
#include <rte_prefetch.h>

#include <cstdint>

#include "rnic/port/rx_stage.h"

namespace tandem::rnic::dpdk {

using port::check_ingress;
using port::EgressRoute;
using port::kStageNames;
using port::Stage;
using port::WorkerCounters;

// An mbuf as RxStage reads it (all inline).
struct MbufFrames {
  using Buf = rte_mbuf;
  static uint8_t* data(rte_mbuf* b) noexcept { return rte_pktmbuf_mtod(b, uint8_t*); }
  static uint32_t len(const rte_mbuf* b) noexcept { return b->pkt_len; }
  static bool segmented(const rte_mbuf* b) noexcept { return b->nb_segs > 1; }
  static uint8_t* linearize(rte_mbuf* b, uint32_t len, uint8_t* scratch) noexcept {
    return static_cast<uint8_t*>(const_cast<void*>(rte_pktmbuf_read(b, 0, len, scratch)));
  }
  static void prefetch(const rte_mbuf* b) noexcept { rte_prefetch0(rte_pktmbuf_mtod(b, const void*)); }
};

using RxStage = port::RxStage<MbufFrames>;

}  // namespace tandem::rnic::dpdk
