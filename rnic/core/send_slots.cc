// SendSlots: send WRs written into the SQ slot by the caller and checked
// there (send_slots.h). The checks are Qp::post_send's (requester.cc) and
// ud_post_send's (ud.cc), on the slot instead of a SendWr.
#include "rnic/core/send_slots.h"

#include <cerrno>

#include "rnic/core/qp.h"

namespace tandem::rnic {

SendSlots::SendSlots(Transport& t, uint32_t qpn) noexcept : t_(&t), qp_(t.find_qp(qpn)) {}

SendSlots::~SendSlots() {
  if (posted_) t_->activate(qp_);
}

uint32_t SendSlots::room() const noexcept {
  if (qp_ == nullptr) return 0;
  return qp_->init.sq_depth - (qp_->sq_tail - qp_->sq_head);
}

void SendSlots::begin(uint64_t wr_id, ibv_wr_opcode op, uint32_t send_flags, uint32_t imm_data,
                      uint64_t remote_addr, uint32_t rkey) noexcept {
  SendWqe& w = qp_->wqe(qp_->sq_tail);
  w_ = &w;
  w.wr_id = wr_id;
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  w.imm_data = imm_data;
  w.opcode = static_cast<uint32_t>(op) & 0xFF;
  w.num_sge = 0;
  flags_ = send_flags;
  inline_len_ = 0;
  inline_bad_ = false;
}

void SendSlots::sge(uint32_t j, uint64_t va, uint32_t len, uint32_t lkey) noexcept {
  if (j >= kMaxSge) return;
  // The raw address until post() resolves it in place.
  w_->sge[j] = WqeSge{reinterpret_cast<uint8_t*>(va), len};
  lkey_[j] = lkey;
  if (j + 1 > w_->num_sge) w_->num_sge = static_cast<uint8_t>(j + 1);
}

uint8_t* SendSlots::inline_data(uint32_t len) noexcept {
  flags_ |= IBV_SEND_INLINE;
  if (len > qp_->init.max_inline) {
    inline_bad_ = true;
    return nullptr;
  }
  uint8_t* p = qp_->sq_inline.data() + std::size_t{qp_->sq_tail & qp_->sq_mask} * qp_->init.max_inline;
  inline_len_ = len;
  w_->num_sge = len ? 1 : 0;
  w_->sge[0] = WqeSge{p, len};
  return p;
}

void SendSlots::ud_dest(const UdDest& d) noexcept {
  // As ud_post_send: the destination where an RC WQE keeps its RDMA fields.
  w_->remote_addr = uint64_t{d.path_seed} << 32 | d.peer;
  w_->rkey = (d.remote_qkey & 0x80000000u) ? qp_->attr.qkey : d.remote_qkey;
  w_->recv_idx = d.remote_qpn & 0xFFFFFF;
}

int SendSlots::post() noexcept {
  Qp& q = *qp_;
  SendWqe& w = *w_;
  const uint32_t op = w.opcode;
  if (q.state != QpState::kRts && q.state != QpState::kRtr) {
    if (q.state != QpState::kError) return EINVAL;
    q.send_cq->push(Completion{w.wr_id, IBV_WC_WR_FLUSH_ERR, send_wc_opcode(w.op()), 0, 0, q.qpn,
                               q.ud ? 0 : q.attr.dest_qp_num, 0});
    return 0;
  }
  if (q.sq_tail - q.sq_head >= q.init.sq_depth) return ENOMEM;
  constexpr uint32_t kRc = 1u << IBV_WR_RDMA_WRITE | 1u << IBV_WR_RDMA_WRITE_WITH_IMM | 1u << IBV_WR_SEND |
                           1u << IBV_WR_SEND_WITH_IMM | 1u << IBV_WR_RDMA_READ;
  constexpr uint32_t kUd = 1u << IBV_WR_SEND | 1u << IBV_WR_SEND_WITH_IMM;
  constexpr uint32_t kConsumesRecv = 1u << IBV_WR_SEND | 1u << IBV_WR_SEND_WITH_IMM | 1u << IBV_WR_RDMA_WRITE_WITH_IMM;
  if (op >= 32 || !(((q.ud ? kUd : kRc) >> op) & 1)) return EINVAL;
  const bool is_read = op == IBV_WR_RDMA_READ;
  const bool inl = (flags_ & IBV_SEND_INLINE) != 0;
  uint64_t len = 0;
  if (inl) {
    if (inline_bad_ || is_read) return EINVAL;
    len = inline_len_;
  } else {
    for (uint32_t j = 0; j < w.num_sge; ++j) {
      const uint64_t va = reinterpret_cast<uint64_t>(w.sge[j].ptr);
      if (!resolve_sge(*t_, q.init.pd, is_read, va, w.sge[j].len, lkey_[j], w.sge[j])) return EINVAL;
      len += w.sge[j].len;
    }
    if (len > (1ull << 31)) return EINVAL;
  }
  w.len = static_cast<uint32_t>(len);
  // UD: one datagram; one over the MTU completes with LOC_LEN_ERR in its turn (ud_tx).
  w.npkts = q.ud || w.len <= q.mtu() ? 1 : (w.len + q.mtu() - 1) / q.mtu();
  w.pkts_sent = 0;
  if (!q.ud && ((kConsumesRecv >> op) & 1)) {
    w.recv_idx = q.next_recv_idx;
    q.next_recv_idx = (q.next_recv_idx + 1) & 0xFFFFFF;
  }
  w.status = IBV_WC_SUCCESS;
  w.signaled = wqe_signal(flags_, q.init.complete_unsignaled);
  w.solicited = (flags_ & IBV_SEND_SOLICITED) != 0;
  ++q.sq_tail;
  posted_ = true;
  return 0;
}

}  // namespace tandem::rnic
