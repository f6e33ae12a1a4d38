// The CQ object of the drop-in libibverbs: an ibv_cq, or an ibv_cq_ex made by
// ibv_create_cq_ex (which starts with the same fields, so ibv_cq_ex_to_cq and
// every ibv_cq verb work on it), in front of rnic/host's CQ.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>

#include "rnic/host/verbs.h"

namespace tandem::rnic::verbs {

struct TandemCq {
  union {
    ibv_cq cq;       // first: what the application holds
    ibv_cq_ex cqx;   // made by ibv_create_cq_ex
  };
  host::Cq* h;
  std::atomic<uint32_t> empty_polls{0};  // consecutive polls that found nothing
  uint32_t events_delivered = 0;  // async events handed out for it (under cq.mutex); destroy waits for their acks
  // ibv_cq_ex: the completion start_poll/next_poll took, and when the worker wrote it.
  ibv_wc cur{};
  uint64_t cur_ts = 0;
};

// The ibv_wc_flags_ex ibv_create_cq_ex accepts: what every completion carries.
inline constexpr uint64_t kCqExFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                                       IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                                       IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
// The worker's clock as ibv_query_device_ex reports it: completion timestamps
// count nanoseconds (hca_core_clock in kHz).
inline constexpr uint64_t kCoreClockKhz = 1'000'000;

// rnic/host's poll_cq with the spin-yield accounting of ibv_poll_cq
// (objects.cc): > 0 completions taken, 0 none, < 0 the CQ failed.
int poll_counted(TandemCq* c, int n, ibv_wc* wc, uint64_t* timestamps);
// The ibv_cq_ex poll and read ops over poll_counted (cq_ex.cc).
void install_cq_ex_ops(TandemCq* c);

}  // namespace tandem::rnic::verbs
