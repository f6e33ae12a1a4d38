// HostServer's shared receive queues. An SRQ is a receive ring any QP created
// on it may consume; it has a doorbell bit of its own, reported by ready_qps
// as kSrqDoorbell | handle, and the worker hands its WQEs to the transport's
// SRQ, which gives each one to the QP whose message needs it.
// Split as the rest of HostServer (README "Two halves"): the control half
// maps the ring, takes the handle, doorbell bit and PD reference, and sends
// the finished SrqSlot; the fast half installs it (and the kSrq* events) and
// fetches its WQEs.
#include <algorithm>
#include <cstring>

#include "rnic/host/control_msg.h"
#include "rnic/host/srq_slot.h"
#include "rnic/host/wqe_fetch.h"

namespace tandem::rnic::host {

namespace {

// As host_server.cc: generation (1..255) << 16 | slot, never 0.
constexpr uint32_t srq_handle(uint8_t gen, uint32_t index) noexcept { return (uint32_t{gen} << 16) | index; }
constexpr uint8_t srq_next_gen(uint8_t g) noexcept { return g == 255 ? 1 : static_cast<uint8_t>(g + 1); }
constexpr uint32_t kMaxSrqs = 0xFFFF;

}  // namespace

// ---------------------------------------------------------------- control half

HostServer::SrqCtl* HostServer::find_srq_ctl(uint32_t handle) noexcept {
  const uint32_t index = handle & 0xFFFF;
  if (index >= srqs_ctl_.size() || (handle >> 24) != 0) return nullptr;
  SrqCtl& s = srqs_ctl_[index];
  return s.used && s.gen == static_cast<uint8_t>(handle >> 16) ? &s : nullptr;
}

Status HostServer::on_create_srq(App& app, uint32_t app_index, const Request& req, int* fds, std::size_t nfds,
                                 Reply* rep) {
  const CreateSrqRequest& c = req.body.create_srq;
  if (nfds != 1) return Status::kProtocolError;
  const uint32_t app_id = app_id_of(app);
  if (!is_power_of_two(c.depth) || c.depth > config_.max_queue_depth) return Status::kInvalidArgument;
  // A limit needs the event that reports it (v2), and cannot exceed the depth (verbs: EINVAL).
  const uint32_t limit = version_of(app) >= 2 ? c.limit : 0;
  if (limit > c.depth) return Status::kInvalidArgument;
  // The transport's room (the port's core holds config_.max_srqs): refused here, not later
  // as its QPs failing.
  if (srq_count_ >= std::min(config_.max_srqs, kMaxSrqs)) return Status::kNoResources;
  // SRQs are charged like QPs: a count and their depth in bytes, before anything is made.
  if (!quotas_->take(app_usage(app), app_account(app), Resource::kSrqs, 1)) return Status::kOverLimit;
  const SrqLayout layout = srq_layout(c.depth);
  ShmRegion region;
  Status st = ShmRegion::map_fd(fds[0], layout.bytes, layout.bytes + huge_page_size(), true, &region);
  fds[0] = -1;
  uint64_t queue_bytes = region.size() + sizeof(SrqCtl) + sizeof(SrqSlot);
  if (config_.srq_worker_bytes) queue_bytes += config_.srq_worker_bytes(c.depth);
  bool charged = false;
  if (st == Status::kOk) {
    charged = quotas_->take(app_usage(app), app_account(app), Resource::kQueueBytes, queue_bytes);
    if (!charged) st = Status::kOverByteLimit;
  }
  if (st == Status::kOk && !take_pd_ref(c.pd, app_id)) st = Status::kNotFound;
  const uint32_t bit = st == Status::kOk ? take_doorbell_bit(app) : UINT32_MAX;
  if (st == Status::kOk && bit == UINT32_MAX) {
    drop_pd_ref(c.pd);
    st = Status::kNoResources;  // the application's doorbell bits are all taken
  }
  if (st != Status::kOk) {
    if (charged) quotas_->give(&app_usage(app), app_account(app), Resource::kQueueBytes, queue_bytes);
    quotas_->give(&app_usage(app), app_account(app), Resource::kSrqs, 1);
    return st;
  }
  uint32_t index;
  if (!free_srqs_.empty()) {
    index = free_srqs_.back();
    free_srqs_.pop_back();
  } else {
    index = static_cast<uint32_t>(srqs_ctl_.size());
    srqs_ctl_.emplace_back();
  }
  SrqCtl& s = srqs_ctl_[index];
  s.used = true;
  s.gen = srq_next_gen(s.gen);
  s.app_id = app_id;
  s.app_index = app_index;
  s.pd = c.pd;
  s.doorbell_bit = bit;
  s.refs = 0;
  s.account = app_account(app);
  s.charged_queue_bytes = queue_bytes;
  const uint32_t handle = srq_handle(s.gen, index);
  // The fast half's record, finished here: the lcore only stores it.
  ControlMsg m;
  m.kind = MsgKind::kSrqCreate;
  m.index = index;
  SrqSlot& f = m.srq;
  f.used = true;
  f.gen = s.gen;
  f.app_id = app_id;
  f.app_index = app_index;
  f.pd = c.pd;
  f.depth = c.depth;
  f.doorbell_bit = bit;
  f.limit = limit;
  uint8_t* base = region.data();
  f.ring = RingReader<RecvWqe>(reinterpret_cast<RingControl*>(base + layout.control),
                               reinterpret_cast<RecvWqe*>(base + layout.entries), c.depth);
  mapped_bytes_ += region.size();
  s.memory = std::move(region);
  ++srq_count_;
  if (!send_to_fast(m)) return Status::kWorkerGone;
  rep->body.create_srq.srq = handle;
  rep->body.create_srq.doorbell_bit = bit;
  return Status::kOk;
}

// Control-side release, once the fast half dropped the SRQ (by kSrqDestroy or kDetach).
void HostServer::free_srq(uint32_t index) {
  SrqCtl& s = srqs_ctl_[index];
  ResourceAmounts* used = usage_of_app(s.app_index, s.app_id);
  quotas_->give(used, s.account, Resource::kSrqs, 1);
  quotas_->give(used, s.account, Resource::kQueueBytes, s.charged_queue_bytes);
  s.charged_queue_bytes = 0;
  give_doorbell_bit(s.app_index, s.app_id, s.doorbell_bit);
  drop_pd_ref(s.pd);
  retire(std::move(s.memory));
  s.used = false;
  free_srqs_.push_back(index);
  --srq_count_;
}

Status HostServer::on_destroy_srq(App& app, const Request& req) {
  SrqCtl* s = find_srq_ctl(req.body.destroy_srq.srq);
  if (s == nullptr || s->app_id != app_id_of(app)) return Status::kNotFound;
  if (s->refs != 0) return Status::kBusy;  // verbs: EBUSY while QPs use it
  const auto index = static_cast<uint32_t>(s - srqs_ctl_.data());
  ControlMsg m;
  m.kind = MsgKind::kSrqDestroy;
  m.index = index;
  if (!send_to_fast(m)) return Status::kWorkerGone;
  free_srq(index);
  return Status::kOk;
}

Status HostServer::on_modify_srq(App& app, const Request& req) {
  if (version_of(app) < 2) return Status::kUnsupported;
  const ModifySrqRequest& r = req.body.modify_srq;
  SrqCtl* s = find_srq_ctl(r.srq);
  if (s == nullptr || s->app_id != app_id_of(app)) return Status::kNotFound;
  ControlMsg m;
  m.kind = MsgKind::kSrqModify;
  m.index = static_cast<uint32_t>(s - srqs_ctl_.data());
  m.limit = r.limit;
  ControlResult res;
  if (!send_to_fast(m, &res)) return Status::kWorkerGone;
  return static_cast<Status>(res.status);
}

// ---------------------------------------------------------------- fast half

void HostServer::apply_srq(const ControlMsg& m, ControlResult* r) noexcept {
  if (m.kind == MsgKind::kSrqDestroy) {
    if (m.index < srqs_.size() && srqs_[m.index].used) fast_free_srq(m.index);
    return;
  }
  if (m.kind == MsgKind::kSrqModify) {
    SrqSlot* s = m.index < srqs_.size() && srqs_[m.index].used ? &srqs_[m.index] : nullptr;
    // The limit cannot exceed the depth (verbs: EINVAL); it is re-armed here.
    const Status st = s == nullptr ? Status::kNotFound : m.limit > s->depth ? Status::kInvalidArgument : Status::kOk;
    if (st == Status::kOk) s->limit = m.limit;
    if (r != nullptr) r->status = static_cast<uint32_t>(st);
    return;
  }
  if (m.index >= srqs_.size()) srqs_.resize(m.index + 1);
  SrqSlot& s = srqs_[m.index];
  s = m.srq;
  const uint32_t handle = srq_handle(s.gen, m.index);
  fast_bind_doorbell(s.app_index, s.app_id, s.doorbell_bit, kSrqDoorbell | handle);
  HostEvent ev{};
  ev.kind = HostEventKind::kSrqCreated;
  ev.app_id = s.app_id;
  ev.srq = handle;
  ev.srq_depth = s.depth;
  ev.pd = s.pd;
  events_.push_back(ev);
}

void HostServer::fast_free_srq(uint32_t index) noexcept {
  SrqSlot& s = srqs_[index];
  forget_pending(s.app_index, s.pending_events);
  HostEvent ev{};
  ev.kind = HostEventKind::kSrqDestroyed;
  ev.app_id = s.app_id;
  ev.srq = srq_handle(s.gen, index);
  events_.push_back(ev);
  fast_bind_doorbell(s.app_index, s.app_id, s.doorbell_bit, 0);
  s = SrqSlot{.gen = s.gen};
}

HostServer::SrqSlot* HostServer::find_srq(uint32_t handle) noexcept {
  const uint32_t index = handle & 0xFFFF;
  if (index >= srqs_.size() || (handle >> 24) != 0) return nullptr;
  SrqSlot& s = srqs_[index];
  return s.used && s.gen == static_cast<uint8_t>(handle >> 16) ? &s : nullptr;
}

std::size_t HostServer::fetch_srq_recv(uint32_t srq, std::span<RecvWork> out) noexcept {
  return fetch_srq_recv_to(srq, out.size(), [&](std::size_t i) -> RecvWork& { return out[i]; });
}

std::size_t HostServer::fetch_srq_recv(uint32_t srq, RecvWork* const* out, std::size_t max) noexcept {
  return fetch_srq_recv_to(srq, max, [&](std::size_t i) -> RecvWork& { return *out[i]; });
}

template <class Out>
std::size_t HostServer::fetch_srq_recv_to(uint32_t srq, std::size_t max, Out&& out) noexcept {
  RecvWorkSink<Out&> sink{out};
  return fetch_srq_recv_into(srq, max, sink);
}

uint32_t HostServer::srq_limit(uint32_t srq) noexcept {
  SrqSlot* s = find_srq(srq & ~kSrqDoorbell);
  return s != nullptr ? s->limit : 0;
}

bool HostServer::check_srq_limit(uint32_t srq, uint32_t posted) noexcept {
  SrqSlot* s = find_srq(srq & ~kSrqDoorbell);
  if (s == nullptr || s->limit == 0 || posted >= s->limit) return false;
  s->limit = 0;  // fires once; the application arms it again (ibv_modify_srq)
  raise_event(s->app_index, IBV_EVENT_SRQ_LIMIT_REACHED, srq & ~kSrqDoorbell, s->pending_events, kPendSrqLimit);
  return true;
}

uint32_t HostServer::srq_queued(uint32_t srq) noexcept {
  SrqSlot* s = find_srq(srq & ~kSrqDoorbell);
  return s != nullptr ? s->ring.available() : 0;
}

}  // namespace tandem::rnic::host
