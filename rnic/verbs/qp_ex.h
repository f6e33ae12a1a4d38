// The extended send API (ibv_qp_ex, ibv_wr_*) of the drop-in libibverbs. A QP
// made by ibv_create_qp_ex carries an ibv_qp_ex; its wr_* builders fill
// ibv_send_wr entries between wr_start and wr_complete, which posts them all
// through the same rnic/host post_send as ibv_post_send.
#pragma once

#include <infiniband/verbs.h>

#include "rnic/host/verbs.h"

namespace tandem::rnic::verbs {

struct WrBatch;

// The head of every QP object: the application's ibv_qp (or ibv_qp_ex, which
// starts with it), the worker's QP, and the batch only extended QPs have.
struct QpHead {
  union {
    ibv_qp qp;
    ibv_qp_ex qpx;
  };
  host::Qp* h;
  WrBatch* batch;  // nullptr: not made by ibv_create_qp_ex (ibv_qp_to_qp_ex gives NULL)
};

// The send ops Tandem executes (IBV_QP_EX_WITH_*).
inline constexpr uint64_t kSendOpsSupported = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                              IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                              IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                              IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

// Allocates the batch for q's granted caps (once: no allocation per WR) and
// fills every wr_* pointer; false when out of memory.
bool make_qp_ex(QpHead* q);
void free_qp_ex(QpHead* q);

}  // namespace tandem::rnic::verbs
