// Posting send WRs in place: the caller writes each WR's fields straight into
// the QP's next SQ slot and posts it there, so a WR read from a host ring is
// copied once (into the slot that holds it until completion), as an RNIC
// fetches a WQE into its own queue. The worker's port layer posts this way;
// Transport::post_send (a SendWr) is for callers that build WRs themselves.
#pragma once

#include <cstdint>

#include "rnic/core/transport.h"
#include "rnic/core/verbs_types.h"

namespace tandem::rnic {

struct Qp;
struct SendWqe;

class SendSlots {
 public:
  SendSlots(Transport& t, uint32_t qpn) noexcept;
  ~SendSlots();  // a QP with new WRs goes on the active list
  SendSlots(const SendSlots&) = delete;
  SendSlots& operator=(const SendSlots&) = delete;

  bool ok() const noexcept { return qp_ != nullptr; }
  uint32_t room() const noexcept;  // WRs that can be posted now (0 for no QP)

  // One WR: begin, its gather entries (raw: checked by post) or its inline
  // bytes, the destination on a UD QP, then post. imm_data in host order.
  void begin(uint64_t wr_id, ibv_wr_opcode op, uint32_t send_flags, uint32_t imm_data, uint64_t remote_addr,
             uint32_t rkey) noexcept;
  void sge(uint32_t j, uint64_t va, uint32_t len, uint32_t lkey) noexcept;  // j < kMaxSge
  // Where `len` inline bytes go (held in the SQ until completion); nullptr
  // if over QpInitAttr::max_inline (post then refuses the WR).
  uint8_t* inline_data(uint32_t len) noexcept;
  void ud_dest(const UdDest& d) noexcept;
  void atomic(uint64_t compare_add, uint64_t swap) noexcept;  // IBV_WR_ATOMIC_*: the operands
  // As Transport::post_send: 0 (posted, or completed with FLUSH_ERR on a QP
  // in ERROR), ENOMEM (no room), EINVAL (state, opcode, SGEs: lkey, bounds,
  // access; inline data over max_inline). A refused WR leaves no trace.
  int post() noexcept;

 private:
  Transport* t_;
  Qp* qp_;
  SendWqe* w_ = nullptr;
  uint32_t flags_ = 0;
  bool posted_ = false;
  uint32_t lkey_[kMaxSge] = {};
};

}  // namespace tandem::rnic
