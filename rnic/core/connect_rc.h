// The three modify_qp calls that bring an RC QP to RTS, as a verbs program
// makes them: INIT (access flags), RTR (MTU, destination QPN, RQ PSN and the
// path fields set with IBV_QP_AV), RTS (SQ PSN, timeout). For tests,
// benchmarks and tools that drive a Transport directly.
#pragma once

#include <cstdint>

#include "rnic/core/transport.h"

namespace tandem::rnic {

// `a` gives every value; its state is ignored. from_reset first moves the QP
// to RESET, so a used QP can be connected again. Returns the first failing
// modify_qp's error, 0 when the QP is in RTS.
inline int connect_rc(Transport& t, uint32_t qpn, QpAttr a, bool from_reset = false) noexcept {
  if (from_reset) {
    a.state = QpState::kReset;
    if (int r = t.modify_qp(qpn, a, IBV_QP_STATE)) return r;
  }
  a.state = QpState::kInit;
  if (int r = t.modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS)) return r;
  a.state = QpState::kRtr;
  if (int r = t.modify_qp(qpn, a,
                          IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_AV))
    return r;
  a.state = QpState::kRts;
  return t.modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT);
}

}  // namespace tandem::rnic
