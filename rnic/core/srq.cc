// Shared receive queues: creation, posting, and what the I/O layer may ask.
// Taking a WQE for a message is the responder's (Qp::srq_fill, qp.h).
#include <cerrno>

#include "rnic/core/qp.h"
#include "rnic/core/srq.h"

namespace tandem::rnic {

uint32_t Transport::create_srq(uint32_t capacity, uint32_t pd) {
  if (capacity == 0 || capacity > (1u << 24)) return 0;
  std::size_t i = 0;
  while (i < srqs_.size() && srqs_[i]) ++i;
  if (i == srqs_.size()) {
    if (srqs_.size() >= cfg_.max_srqs) return 0;
    srqs_.emplace_back();
  }
  auto s = std::make_unique<Srq>();
  uint32_t ring = 1;
  while (ring < capacity) ring <<= 1;
  s->pool.resize(capacity);
  s->queue.resize(ring);
  s->mask = ring - 1;
  s->pd = pd;
  s->free.reserve(capacity);
  for (uint32_t k = capacity; k-- > 0;) s->free.push_back(k);
  srqs_[i] = std::move(s);
  return static_cast<uint32_t>(i + 1);
}

int Transport::destroy_srq(uint32_t id) noexcept {
  Srq* s = srq(id);
  if (s == nullptr) return EINVAL;
  if (s->qps != 0) return EBUSY;
  srqs_[id - 1].reset();
  return 0;
}

int Transport::post_srq_recv(uint32_t id, const RecvWr& wr) noexcept {
  RecvWr* slot = srq_recv_slot(id);
  if (slot == nullptr) return srq(id) == nullptr ? EINVAL : ENOMEM;
  *slot = wr;
  return post_srq_recv_slot(id);
}

RecvWr* Transport::srq_recv_slot(uint32_t id) noexcept {
  Srq* s = srq(id);
  return s == nullptr || s->free.empty() ? nullptr : &s->pool[s->free.back()].wr;
}

int Transport::post_srq_recv_slot(uint32_t id) noexcept {
  Srq* s = srq(id);
  if (s == nullptr) return EINVAL;
  if (s->free.empty()) return ENOMEM;
  const uint32_t slot = s->free.back();
  if (!check_recv_wqe(*this, s->pd, s->pool[slot])) return EINVAL;
  s->free.pop_back();
  s->queue[s->tail++ & s->mask] = slot;
  return 0;
}

uint32_t Transport::srq_room(uint32_t id) const noexcept {
  const Srq* s = srq(id);
  return s != nullptr ? static_cast<uint32_t>(s->free.size()) : 0;
}

uint32_t Transport::srq_posted(uint32_t id) const noexcept {
  const Srq* s = srq(id);
  return s != nullptr ? s->posted() : 0;
}

uint64_t Transport::srq_empty(uint32_t id) const noexcept {
  const Srq* s = srq(id);
  return s != nullptr ? s->empty : 0;
}

}  // namespace tandem::rnic
