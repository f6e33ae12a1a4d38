// SendSlots: send WRs written into the SQ slot by the caller and checked
// there (send_slots.h) by Qp::post_filled, as every send post is.
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
  // A full SQ's next slot may still hold an outstanding WR: the spare (post: ENOMEM).
  SendWqe& w = room() > 0 ? qp_->wqe(qp_->sq_tail) : qp_->sq_spare;
  w_ = &w;
  w.wr_id = wr_id;
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  w.imm_data = imm_data;
  w.opcode = static_cast<uint32_t>(op) < 256 ? static_cast<uint32_t>(op) : 255;
  w.num_sge = 0;
  flags_ = send_flags;
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
  if (len > qp_->init.max_inline || w_ == &qp_->sq_spare) {
    w_->num_sge = 255;  // refused by post (or ENOMEM first)
    return nullptr;
  }
  uint8_t* p = qp_->sq_inline.data() + std::size_t{qp_->sq_tail & qp_->sq_mask} * qp_->init.max_inline;
  w_->num_sge = len ? 1 : 0;
  w_->sge[0] = WqeSge{p, len};
  return p;
}

void SendSlots::ud_dest(const UdDest& d) noexcept { qp_->fill_ud_dest(*w_, d); }

void SendSlots::atomic(uint64_t compare_add, uint64_t swap) noexcept { w_->set_atomic(compare_add, swap); }

int SendSlots::post() noexcept {
  const int r = qp_->post_filled(*w_, flags_, lkey_);
  posted_ |= r == 0;
  return r;
}

}  // namespace tandem::rnic
