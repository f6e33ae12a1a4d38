// ibv_wr_* on an extended QP: each builder fills one ibv_send_wr of a batch
// allocated at creation (SGEs and inline bytes copied, as providers copy them
// into their WQEs, so the caller's arrays may go away before wr_complete);
// wr_complete posts the batch through rnic/host post_send, so the ring holds
// exactly what ibv_post_send would have written. As in rdma-core, the first
// error is remembered, later builders are ignored and wr_complete returns it
// with nothing posted; wr_abort discards the batch.
#include "rnic/verbs/qp_ex.h"

#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "rnic/host/queue_layout.h"
#include "rnic/verbs/device.h"

namespace th = tandem::rnic::host;

namespace tandem::rnic::verbs {

struct WrEntry {
  ibv_send_wr wr;
  ibv_sge sge[th::kMaxSge];
  uint8_t inl[th::kMaxInline];
};

struct WrBatch {
  std::vector<WrEntry> e;  // one per SQ entry granted: a batch never holds more
  uint32_t n = 0;
  int err = 0;
};

namespace {

QpHead* head(ibv_qp_ex* x) { return reinterpret_cast<QpHead*>(x); }
WrBatch& batch(ibv_qp_ex* x) { return *head(x)->batch; }

// A new WR of the batch, or nullptr after an error (or when it is full).
ibv_send_wr* add(ibv_qp_ex* x, ibv_wr_opcode op) {
  WrBatch& b = batch(x);
  if (b.err != 0) return nullptr;
  if (b.n == b.e.size()) {
    b.err = ENOMEM;  // more WRs than the SQ holds, as mlx5 answers a full SQ
    return nullptr;
  }
  WrEntry& en = b.e[b.n];
  std::memset(&en.wr, 0, sizeof en.wr);
  en.wr.wr_id = x->wr_id;
  en.wr.send_flags = x->wr_flags & ~static_cast<unsigned>(IBV_SEND_INLINE);  // set by wr_set_inline_data
  en.wr.opcode = op;
  en.wr.sg_list = en.sge;
  if (b.n > 0) b.e[b.n - 1].wr.next = &en.wr;
  ++b.n;
  return &en.wr;
}

// The WR the data setters apply to: the last one built.
WrEntry* last(ibv_qp_ex* x) {
  WrBatch& b = batch(x);
  if (b.err != 0) return nullptr;
  if (b.n == 0) {
    b.err = EINVAL;  // a setter before any op
    return nullptr;
  }
  return &b.e[b.n - 1];
}

void fail(ibv_qp_ex* x, int err) {
  WrBatch& b = batch(x);
  if (b.err == 0) b.err = err;
}

void wr_rdma_write(ibv_qp_ex* x, uint32_t rkey, uint64_t addr) {
  if (ibv_send_wr* w = add(x, IBV_WR_RDMA_WRITE)) {
    w->wr.rdma.rkey = rkey;
    w->wr.rdma.remote_addr = addr;
  }
}
void wr_rdma_write_imm(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, __be32 imm) {
  if (ibv_send_wr* w = add(x, IBV_WR_RDMA_WRITE_WITH_IMM)) {
    w->wr.rdma.rkey = rkey;
    w->wr.rdma.remote_addr = addr;
    w->imm_data = imm;
  }
}
void wr_rdma_read(ibv_qp_ex* x, uint32_t rkey, uint64_t addr) {
  if (ibv_send_wr* w = add(x, IBV_WR_RDMA_READ)) {
    w->wr.rdma.rkey = rkey;
    w->wr.rdma.remote_addr = addr;
  }
}
void wr_atomic_cmp_swp(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  if (ibv_send_wr* w = add(x, IBV_WR_ATOMIC_CMP_AND_SWP)) w->wr.atomic = {addr, compare, swap, rkey};
}
void wr_atomic_fetch_add(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, uint64_t add_value) {
  if (ibv_send_wr* w = add(x, IBV_WR_ATOMIC_FETCH_AND_ADD)) w->wr.atomic = {addr, add_value, 0, rkey};
}
void wr_send(ibv_qp_ex* x) { add(x, IBV_WR_SEND); }
void wr_send_imm(ibv_qp_ex* x, __be32 imm) {
  if (ibv_send_wr* w = add(x, IBV_WR_SEND_WITH_IMM)) w->imm_data = imm;
}

void wr_set_sge(ibv_qp_ex* x, uint32_t lkey, uint64_t addr, uint32_t length) {
  WrEntry* en = last(x);
  if (en == nullptr) return;
  en->wr.send_flags &= ~static_cast<unsigned>(IBV_SEND_INLINE);
  en->sge[0] = ibv_sge{addr, length, lkey};
  en->wr.num_sge = length != 0 ? 1 : 0;  // a zero-length message has no SGE (as rxe)
}
void wr_set_sge_list(ibv_qp_ex* x, size_t num, const ibv_sge* list) {
  WrEntry* en = last(x);
  if (en == nullptr) return;
  if (num > head(x)->h->cap.max_send_sge || (num > 0 && list == nullptr)) return fail(x, EINVAL);
  en->wr.send_flags &= ~static_cast<unsigned>(IBV_SEND_INLINE);
  if (num > 0) std::memcpy(en->sge, list, num * sizeof *list);
  en->wr.num_sge = static_cast<int>(num);
}
void wr_set_inline_data_list(ibv_qp_ex* x, size_t num, const ibv_data_buf* bufs) {
  WrEntry* en = last(x);
  if (en == nullptr) return;
  if (en->wr.opcode == IBV_WR_RDMA_READ || en->wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
      en->wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
    return fail(x, EINVAL);  // a READ or an atomic has nothing to carry
  size_t total = 0;
  for (size_t i = 0; i < num; ++i) {
    if (bufs[i].length > head(x)->h->cap.max_inline_data - total) return fail(x, ENOMEM);  // as mlx5
    std::memcpy(en->inl + total, bufs[i].addr, bufs[i].length);
    total += bufs[i].length;
  }
  en->wr.send_flags |= IBV_SEND_INLINE;
  en->sge[0] = ibv_sge{reinterpret_cast<uintptr_t>(en->inl), static_cast<uint32_t>(total), 0};
  en->wr.num_sge = total != 0 ? 1 : 0;
}
void wr_set_inline_data(ibv_qp_ex* x, void* addr, size_t length) {
  const ibv_data_buf one{addr, length};
  wr_set_inline_data_list(x, 1, &one);
}

void wr_start(ibv_qp_ex* x) {
  WrBatch& b = batch(x);
  b.n = 0;
  b.err = 0;
}
int wr_complete(ibv_qp_ex* x) {
  WrBatch& b = batch(x);
  const uint32_t n = b.n;
  const int err = b.err;
  b.n = 0;
  b.err = 0;
  if (err != 0) return err;
  if (n == 0) return 0;
  th::Qp* h = head(x)->h;
  // All or nothing, as a provider rings its doorbell once: a batch the SQ has no room for is
  // refused whole instead of being half posted, and so is one with an atomic whose result
  // has no 8-byte entry (which post_send would refuse only when it reached it).
  if (h->sq.free_entries() < n || h->sq.depth() - (h->sq.produced() - h->sq.completed()) < n) return ENOMEM;
  for (uint32_t i = 0; i < n; ++i) {
    const ibv_send_wr& w = b.e[i].wr;
    if ((w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) &&
        (w.num_sge != 1 || w.sg_list[0].length != 8))
      return EINVAL;
  }
  b.e[n - 1].wr.next = nullptr;
  ibv_send_wr* bad = nullptr;
  return errno_of(th::post_send(h, &b.e[0].wr, &bad));
}
void wr_abort(ibv_qp_ex* x) {
  WrBatch& b = batch(x);
  b.n = 0;
  b.err = 0;
}

// A UD QP's destination of the WR just built (its AH, remote QPN and Q_Key).
void wr_set_ud_addr(ibv_qp_ex* x, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  WrEntry* en = last(x);
  if (en == nullptr) return;
  if (head(x)->qp.qp_type != IBV_QPT_UD || ah == nullptr) return fail(x, EINVAL);
  en->wr.wr.ud.ah = ah;
  en->wr.wr.ud.remote_qpn = remote_qpn;
  en->wr.wr.ud.remote_qkey = remote_qkey;
}

// What Tandem does not execute: the batch fails at wr_complete, never a NULL call.
void no_bind_mw(ibv_qp_ex* x, ibv_mw*, uint32_t, const ibv_mw_bind_info*) { fail(x, EOPNOTSUPP); }
void no_local_inv(ibv_qp_ex* x, uint32_t) { fail(x, EOPNOTSUPP); }
void no_send_inv(ibv_qp_ex* x, uint32_t) { fail(x, EOPNOTSUPP); }
void no_send_tso(ibv_qp_ex* x, void*, uint16_t, uint16_t) { fail(x, EOPNOTSUPP); }
void no_atomic_write(ibv_qp_ex* x, uint32_t, uint64_t, const void*) { fail(x, EOPNOTSUPP); }
// Addressing of XRC QPs, which Tandem has not.
void no_xrc_srqn(ibv_qp_ex* x, uint32_t) { fail(x, EINVAL); }

}  // namespace

bool make_qp_ex(QpHead* q) {
  auto* b = new (std::nothrow) WrBatch{};
  if (b == nullptr) return false;
  try {
    b->e.resize(q->h->cap.max_send_wr);
  } catch (const std::bad_alloc&) {
    delete b;
    return false;
  }
  q->batch = b;
  ibv_qp_ex& x = q->qpx;
  x.comp_mask = 0;  // rdma-core defines no ibv_qp_ex comp_mask bit
  x.wr_id = 0;
  x.wr_flags = 0;
  // Every supported op whatever send_ops_flags asked (a superset is harmless, as in mlx5).
  x.wr_rdma_write = wr_rdma_write;
  x.wr_rdma_write_imm = wr_rdma_write_imm;
  x.wr_rdma_read = wr_rdma_read;
  x.wr_send = wr_send;
  x.wr_send_imm = wr_send_imm;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  x.wr_bind_mw = no_bind_mw;
  x.wr_local_inv = no_local_inv;
  x.wr_send_inv = no_send_inv;
  x.wr_send_tso = no_send_tso;
  x.wr_atomic_write = no_atomic_write;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_xrc_srqn = no_xrc_srqn;
  return true;
}

void free_qp_ex(QpHead* q) {
  delete q->batch;
  q->batch = nullptr;
}

}  // namespace tandem::rnic::verbs
