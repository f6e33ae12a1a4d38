// ControlServer's per-object requests (the control thread): PDs, MRs, CQs,
// QPs and SRQs. Each checks the request, charges the fair shares, maps the
// application's memfd (and, for an MR, has the device map it), takes a slot,
// handle and references, then sends the finished object to the fast half and
// answers once it is applied; a destroy goes the other way round (the fast
// half drops the object first, then the mapping is retired here).
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "rnic/host/control_msg.h"
#include "rnic/host/control_records.h"
#include "rnic/host/control_server.h"
#include "rnic/host/fast_records.h"
#include "rnic/host/host_link.h"

namespace tandem::rnic::host {

namespace {

constexpr uint32_t kMaxSrqs = 0xFFFF;  // SRQ handles: 16 bits of slot

}  // namespace

// The usage of the application at `index` if it is still `id` (else it is
// gone, and only its vNIC gets the resource back).
ResourceAmounts* ControlServer::usage_of(uint32_t index, uint32_t id) noexcept {
  return index < apps_.size() && apps_[index] && apps_[index]->id == id ? &apps_[index]->used : nullptr;
}

Status ControlServer::on_alloc_pd(App& app, Reply* rep) {
  if (!quotas_->take(app.used, app.account, Resource::kPds, 1)) return Status::kOverLimit;
  uint32_t index = alloc_slot(pds_, free_pds_, 0xFFFF);
  if (index == UINT32_MAX) {
    quotas_->give(&app.used, app.account, Resource::kPds, 1);
    return Status::kNoResources;
  }
  PdSlot& pd = pds_[index];
  pd.app_id = app.id;
  pd.refs = 0;
  pd.app_index = app.index;
  pd.account = app.account;
  rep->body.pd.pd = make_handle(pd.gen, index);
  return Status::kOk;
}

Status ControlServer::on_dealloc_pd(App& app, const Request& req) {
  uint32_t h = req.body.pd.pd;
  uint32_t index = handle_index(h);
  if (index >= pds_.size() || !pds_[index].used || pds_[index].gen != handle_gen(h) ||
      pds_[index].app_id != app.id) {
    return Status::kNotFound;
  }
  if (pds_[index].refs != 0) return Status::kBusy;
  free_pd(index);
  return Status::kOk;
}

// Maps the application's memory and the device's view of it here, on the
// control thread; the lcore sees the MR only after both are done.
Status ControlServer::on_reg_mr(App& app, const Request& req, int* fds, std::size_t nfds, Reply* rep) {
  const RegMrRequest& m = req.body.reg_mr;
  uint32_t pdi = handle_index(m.pd);
  if (pdi >= pds_.size() || !pds_[pdi].used || pds_[pdi].gen != handle_gen(m.pd) ||
      pds_[pdi].app_id != app.id) {
    return Status::kNotFound;
  }
  if (nfds != 1) return Status::kProtocolError;
  if (m.length == 0 || m.length > config_.max_mr_bytes || m.fd_offset > config_.max_mr_bytes ||
      m.addr + m.length < m.addr) {
    return Status::kInvalidArgument;
  }
  // Remote write without local write is refused by verbs too.
  if ((m.access & IBV_ACCESS_REMOTE_WRITE) != 0 && (m.access & IBV_ACCESS_LOCAL_WRITE) == 0) {
    return Status::kInvalidArgument;
  }
  if (!quotas_->take(app.used, app.account, Resource::kMrs, 1)) return Status::kOverLimit;
  ShmRegion region;
  Status st = ShmRegion::map_fd(fds[0], m.fd_offset + m.length, config_.max_mr_bytes, true, &region);
  fds[0] = -1;
  // The worker's cost is the mapping (and its device mapping) of the whole
  // memfd, so that is what is charged; checked before the device sees it.
  if (st == Status::kOk && !quotas_->take(app.used, app.account, Resource::kBytes, region.size()))
    st = Status::kOverByteLimit;
  const uint32_t index = st == Status::kOk ? alloc_slot(mrs_ctl_, free_mrs_, config_.max_mrs) : UINT32_MAX;
  if (st == Status::kOk && index == UINT32_MAX) {
    quotas_->give(&app.used, app.account, Resource::kBytes, region.size());
    st = Status::kNoResources;
  }
  if (st != Status::kOk) {
    quotas_->give(&app.used, app.account, Resource::kMrs, 1);
    return st;
  }
  if (config_.mapper != nullptr) config_.mapper->map(region.data(), region.size(), region.hugetlb());
  MrCtl& mr = mrs_ctl_[index];
  mr.app_id = app.id;
  mr.pd = m.pd;
  mr.device_mapped = config_.mapper != nullptr;
  mr.app_index = app.index;
  mr.account = app.account;
  mr.charged_bytes = region.size();
  ControlMsg msg;
  msg.kind = MsgKind::kMrRegister;
  msg.index = index;
  msg.gen = mr.gen;
  msg.app_id = app.id;
  msg.pd = m.pd;
  msg.access = m.access;
  msg.addr = m.addr;
  msg.length = m.length;
  msg.base = region.data() + m.fd_offset;
  msg.map_addr = region.data();
  msg.map_length = region.size();
  msg.hugetlb = region.hugetlb();
  mapped_bytes_ += region.size();
  mr.memory = std::move(region);
  ++pds_[pdi].refs;
  ++mr_count_;
  if (!send_to_fast(msg)) return Status::kWorkerGone;
  uint32_t key = make_key(mr.gen, index);
  rep->body.reg_mr.lkey = key;
  rep->body.reg_mr.rkey = key;
  rep->body.reg_mr.hugetlb = mr.memory.hugetlb() ? 1 : 0;
  return Status::kOk;
}

ControlServer::MrCtl* ControlServer::find_mr_ctl(uint32_t key) noexcept {
  uint32_t index = key >> 8;
  if (index >= mrs_ctl_.size()) return nullptr;
  MrCtl& mr = mrs_ctl_[index];
  return mr.used && mr.gen == static_cast<uint8_t>(key) ? &mr : nullptr;
}

// Control-side release, once the fast half no longer has the MR: the
// mapping (and the device's) and the slot go once nothing can touch them.
void ControlServer::free_mr(uint32_t index) {
  MrCtl& mr = mrs_ctl_[index];
  uint32_t pdi = handle_index(mr.pd);
  if (pdi < pds_.size() && pds_[pdi].used && pds_[pdi].refs > 0) --pds_[pdi].refs;
  retire(std::move(mr.memory), mr.device_mapped, index);
  ResourceAmounts* used = usage_of(mr.app_index, mr.app_id);
  quotas_->give(used, mr.account, Resource::kMrs, 1);
  quotas_->give(used, mr.account, Resource::kBytes, mr.charged_bytes);
  mr.charged_bytes = 0;
  mr.used = false;
  mr.device_mapped = false;
  --mr_count_;
}

void ControlServer::free_pd(uint32_t index) {
  PdSlot& pd = pds_[index];
  quotas_->give(usage_of(pd.app_index, pd.app_id), pd.account, Resource::kPds, 1);
  pd.used = false;
  free_pds_.push_back(index);
}

Status ControlServer::on_dereg_mr(App& app, const Request& req) {
  MrCtl* mr = find_mr_ctl(req.body.dereg_mr.lkey);
  if (mr == nullptr || mr->app_id != app.id) return Status::kNotFound;
  auto index = static_cast<uint32_t>(mr - mrs_ctl_.data());
  ControlMsg m;
  m.kind = MsgKind::kMrDeregister;
  m.index = index;
  if (!send_to_fast(m)) return Status::kWorkerGone;
  free_mr(index);
  return Status::kOk;
}

// ibv_rereg_mr's new PD or access, in place: the keys and the memory stay, so
// work already holding the MR keeps valid pointers; what comes next is checked
// against the new PD and access (fast half and core both).
Status ControlServer::on_rereg_mr(App& app, const Request& req) {
  const ReregMrRequest& m = req.body.rereg_mr;
  MrCtl* mr = find_mr_ctl(m.lkey);
  if (mr == nullptr || mr->app_id != app.id) return Status::kNotFound;
  if (m.flags == 0 || (m.flags & ~(kReregPd | kReregAccess)) != 0) return Status::kInvalidArgument;
  if ((m.flags & kReregAccess) != 0 && (m.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
      (m.access & IBV_ACCESS_LOCAL_WRITE) == 0) {
    return Status::kInvalidArgument;
  }
  const bool new_pd = (m.flags & kReregPd) != 0;
  if (new_pd && !take_pd_ref(m.pd, app.id)) return Status::kNotFound;
  ControlMsg msg;
  msg.kind = MsgKind::kMrReregister;
  msg.index = static_cast<uint32_t>(mr - mrs_ctl_.data());
  msg.rereg_flags = m.flags;
  msg.pd = m.pd;
  msg.access = m.access;
  if (!send_to_fast(msg)) {
    if (new_pd) drop_pd_ref(m.pd);
    return Status::kWorkerGone;
  }
  if (new_pd) {
    drop_pd_ref(mr->pd);
    mr->pd = m.pd;
  }
  return Status::kOk;
}

Status ControlServer::on_create_cq(App& app, const Request& req, int* fds, std::size_t nfds,
                                Reply* rep) {
  uint32_t depth = req.body.create_cq.depth;
  bool channel = req.body.create_cq.has_channel != 0;
  const bool with_ts = app.version >= 2 && (req.body.create_cq.flags & kCqWithTimestamps) != 0;
  if (nfds != (channel ? 2u : 1u)) return Status::kProtocolError;
  if (channel && !is_eventfd(fds[1])) return Status::kInvalidArgument;
  if (!is_power_of_two(depth) || depth > config_.max_queue_depth) return Status::kInvalidArgument;
  if (!quotas_->take(app.used, app.account, Resource::kCqs, 1)) return Status::kOverLimit;
  CqLayout layout = cq_layout(depth, with_ts);
  ShmRegion region;
  Status st = ShmRegion::map_fd(fds[0], layout.bytes, layout.bytes + huge_page_size(), true, &region);
  fds[0] = -1;
  // The ring's mapping and this CQ's records: its depth in bytes, charged.
  const uint64_t queue_bytes = region.size() + sizeof(CqCtl) + sizeof(FastPath::CqSlot);
  if (st == Status::kOk && !quotas_->take(app.used, app.account, Resource::kQueueBytes, queue_bytes))
    st = Status::kOverByteLimit;
  const uint32_t index = st == Status::kOk ? alloc_slot(cqs_ctl_, free_cqs_, config_.max_cqs) : UINT32_MAX;
  if (st == Status::kOk && index == UINT32_MAX) {
    quotas_->give(&app.used, app.account, Resource::kQueueBytes, queue_bytes);
    st = Status::kNoResources;
  }
  if (st != Status::kOk) {
    quotas_->give(&app.used, app.account, Resource::kCqs, 1);
    return st;
  }
  CqCtl& cq = cqs_ctl_[index];
  cq.app_id = app.id;
  cq.app_index = app.index;
  cq.account = app.account;
  cq.charged_queue_bytes = queue_bytes;
  cq.timestamps = with_ts;
  cq.refs = 0;
  cq.event_fd = channel ? fds[1] : -1;
  if (channel) fds[1] = -1;
  uint8_t* base = region.data();
  ControlMsg m;
  m.kind = MsgKind::kCqCreate;
  m.index = index;
  m.gen = cq.gen;
  m.app_id = app.id;
  m.app_index = app.index;
  m.cq_ring = RingWriter<Cqe>(reinterpret_cast<RingControl*>(base + layout.control),
                              reinterpret_cast<Cqe*>(base + layout.entries), depth);
  m.notify = reinterpret_cast<CqNotify*>(base + layout.notify);
  m.timestamps = with_ts ? reinterpret_cast<uint64_t*>(base + layout.timestamps) : nullptr;
  m.event_fd = cq.event_fd;
  mapped_bytes_ += region.size();
  cq.memory = std::move(region);
  ++cq_count_;
  if (!send_to_fast(m)) return Status::kWorkerGone;
  rep->body.cq.cq = make_handle(cq.gen, index);
  return Status::kOk;
}

ControlServer::CqCtl* ControlServer::find_cq_ctl(uint32_t handle) noexcept {
  uint32_t index = handle_index(handle);
  if (index >= cqs_ctl_.size()) return nullptr;
  CqCtl& cq = cqs_ctl_[index];
  return cq.used && cq.gen == handle_gen(handle) ? &cq : nullptr;
}

// Control-side release, once the fast half no longer writes the CQ.
void ControlServer::free_cq(uint32_t index) {
  CqCtl& cq = cqs_ctl_[index];
  retire(std::move(cq.memory));
  if (cq.event_fd >= 0) close(cq.event_fd);
  cq.event_fd = -1;
  ResourceAmounts* used = usage_of(cq.app_index, cq.app_id);
  quotas_->give(used, cq.account, Resource::kCqs, 1);
  quotas_->give(used, cq.account, Resource::kQueueBytes, cq.charged_queue_bytes);
  cq.charged_queue_bytes = 0;
  cq.used = false;
  free_cqs_.push_back(index);
  --cq_count_;
}

Status ControlServer::on_destroy_cq(App& app, const Request& req) {
  CqCtl* cq = find_cq_ctl(req.body.destroy_cq.cq);
  if (cq == nullptr || cq->app_id != app.id) return Status::kNotFound;
  if (cq->refs != 0) return Status::kBusy;
  auto index = static_cast<uint32_t>(cq - cqs_ctl_.data());
  ControlMsg m;
  m.kind = MsgKind::kCqDestroy;
  m.index = index;
  if (!send_to_fast(m)) return Status::kWorkerGone;
  free_cq(index);
  return Status::kOk;
}

// ibv_resize_cq: the application's new ring, mapped here; the fast half moves
// the CQEs not yet polled into it (EINVAL if they do not fit) and writes there
// from then on; the old ring is retired once the lcore has let go of it.
Status ControlServer::on_resize_cq(App& app, const Request& req, int* fds, std::size_t nfds) {
  CqCtl* cq = find_cq_ctl(req.body.resize_cq.cq);
  if (cq == nullptr || cq->app_id != app.id) return Status::kNotFound;
  const uint32_t depth = req.body.resize_cq.depth;
  if (nfds != 1) return Status::kProtocolError;
  if (!is_power_of_two(depth) || depth > config_.max_queue_depth) return Status::kInvalidArgument;
  const bool with_ts = cq->timestamps;
  const CqLayout layout = cq_layout(depth, with_ts);
  ShmRegion region;
  Status st = ShmRegion::map_fd(fds[0], layout.bytes, layout.bytes + huge_page_size(), true, &region);
  fds[0] = -1;
  if (st != Status::kOk) return st;
  const uint64_t queue_bytes = region.size() + sizeof(CqCtl) + sizeof(FastPath::CqSlot);
  const uint64_t old_bytes = cq->charged_queue_bytes;
  // The new ring is charged before the old one is given back: for a moment the
  // CQ holds both mappings.
  if (!quotas_->take(app.used, app.account, Resource::kQueueBytes, queue_bytes)) return Status::kOverByteLimit;
  uint8_t* base = region.data();
  ControlMsg m;
  m.kind = MsgKind::kCqResize;
  m.index = static_cast<uint32_t>(cq - cqs_ctl_.data());
  m.cq_ring = RingWriter<Cqe>(reinterpret_cast<RingControl*>(base + layout.control),
                              reinterpret_cast<Cqe*>(base + layout.entries), depth);
  m.notify = reinterpret_cast<CqNotify*>(base + layout.notify);
  m.timestamps = with_ts ? reinterpret_cast<uint64_t*>(base + layout.timestamps) : nullptr;
  ControlResult r;
  if (!send_to_fast(m, &r)) return Status::kWorkerGone;
  if (static_cast<Status>(r.status) != Status::kOk) {
    quotas_->give(&app.used, app.account, Resource::kQueueBytes, queue_bytes);
    return static_cast<Status>(r.status);  // the region is unmapped here: the lcore never wrote it
  }
  mapped_bytes_ += region.size();
  retire(std::move(cq->memory));
  cq->memory = std::move(region);
  quotas_->give(&app.used, app.account, Resource::kQueueBytes, old_bytes);
  cq->charged_queue_bytes = queue_bytes;
  return Status::kOk;
}

Status ControlServer::on_create_qp(App& app, uint32_t app_index, const Request& req, int* fds,
                                std::size_t nfds, Reply* rep) {
  const CreateQpRequest& c = req.body.create_qp;
  if (nfds != 1) return Status::kProtocolError;
  uint32_t pdi = handle_index(c.pd);
  if (pdi >= pds_.size() || !pds_[pdi].used || pds_[pdi].gen != handle_gen(c.pd) ||
      pds_[pdi].app_id != app.id) {
    return Status::kNotFound;
  }
  CqCtl* scq = find_cq_ctl(c.send_cq);
  CqCtl* rcq = find_cq_ctl(c.recv_cq);
  if (scq == nullptr || rcq == nullptr || scq->app_id != app.id || rcq->app_id != app.id) {
    return Status::kNotFound;
  }
  if (c.qp_type != IBV_QPT_RC && c.qp_type != IBV_QPT_UD) return Status::kUnsupported;
  SrqCtl* srq = nullptr;
  if (c.srq != 0 && ((srq = find_srq_ctl(c.srq)) == nullptr || srq->app_id != app.id)) return Status::kNotFound;
  if (!is_power_of_two(c.sq_depth) || !is_power_of_two(c.rq_depth) ||
      c.sq_depth > config_.max_queue_depth || c.rq_depth > config_.max_queue_depth) {
    return Status::kInvalidArgument;
  }
  if (app.free_bits.empty() && app.bits >= kMaxQpsPerApp) return Status::kNoResources;
  if (qp_count_ >= config_.max_qps) return Status::kNoResources;
  if (!quotas_->take(app.used, app.account, Resource::kQps, 1)) return Status::kOverLimit;
  QpQueueLayout layout = qp_queue_layout(c.sq_depth, c.rq_depth);
  ShmRegion region;
  Status st = ShmRegion::map_fd(fds[0], layout.bytes, layout.bytes + huge_page_size(), true, &region);
  fds[0] = -1;
  // Its depths in bytes: the rings' mapping, the records here and the transport's.
  uint64_t queue_bytes = region.size() + sizeof(QpCtl) + sizeof(FastPath::QpSlot);
  if (config_.qp_worker_bytes)
    queue_bytes += config_.qp_worker_bytes(c.sq_depth, c.rq_depth, c.srq != 0, c.qp_type == IBV_QPT_UD);
  if (st == Status::kOk && !quotas_->take(app.used, app.account, Resource::kQueueBytes, queue_bytes))
    st = Status::kOverByteLimit;
  const uint32_t index = st == Status::kOk ? alloc_slot(qps_ctl_, free_qps_, config_.max_qps) : UINT32_MAX;
  if (st == Status::kOk && index == UINT32_MAX) {
    quotas_->give(&app.used, app.account, Resource::kQueueBytes, queue_bytes);
    st = Status::kNoResources;
  }
  if (st != Status::kOk) {
    quotas_->give(&app.used, app.account, Resource::kQps, 1);
    return st;
  }
  uint32_t bit;
  if (!app.free_bits.empty()) {
    bit = app.free_bits.back();
    app.free_bits.pop_back();
  } else {
    bit = app.bits++;
  }
  QpCtl& qp = qps_ctl_[index];
  uint32_t qpn = make_handle(qp.gen, config_.qp_slot_base + index);
  ++app.qps;
  qp.app_id = app.id;
  qp.app_index = app_index;
  qp.doorbell_bit = bit;
  qp.pd = c.pd;
  qp.send_cq = c.send_cq;
  qp.recv_cq = c.recv_cq;
  qp.account = app.account;
  qp.charged_queue_bytes = queue_bytes;
  ControlMsg m;
  m.kind = MsgKind::kQpCreate;
  m.index = index;
  m.gen = qp.gen;
  m.app_id = app.id;
  m.app_index = app_index;
  m.doorbell_bit = bit;
  QpInfo& info = m.info;
  info.qpn = qpn;
  info.app_id = app.id;
  info.app_index = app.index;
  info.vnic_ip = app.vnic_ip;
  info.pd = c.pd;
  info.send_cq = c.send_cq;
  info.recv_cq = c.recv_cq;
  info.state = IBV_QPS_RESET;
  info.path_mtu = IBV_MTU_1024;
  info.sq_sig_all = c.sq_sig_all != 0;
  info.sq_depth = c.sq_depth;
  info.rq_depth = c.rq_depth;
  info.srq = c.srq;
  info.qp_type = static_cast<ibv_qp_type>(c.qp_type);
  info.qkey = 0;
  qp.srq = c.srq;
  uint8_t* base = region.data();
  m.sq = RingReader<SendWqe>(reinterpret_cast<RingControl*>(base + layout.sq_control),
                             reinterpret_cast<SendWqe*>(base + layout.sq_entries), c.sq_depth);
  m.rq = RingReader<RecvWqe>(reinterpret_cast<RingControl*>(base + layout.rq_control),
                             reinterpret_cast<RecvWqe*>(base + layout.rq_entries), c.rq_depth);
  mapped_bytes_ += region.size();
  qp.memory = std::move(region);
  ++scq->refs;
  ++rcq->refs;
  ++pds_[pdi].refs;
  if (srq != nullptr) ++srq->refs;
  ++qp_count_;
  if (!send_to_fast(m)) return Status::kWorkerGone;
  rep->body.create_qp.qpn = qpn;
  rep->body.create_qp.doorbell_bit = bit;
  return Status::kOk;
}

uint32_t ControlServer::take_doorbell_bit(App& app) noexcept {
  if (!app.free_bits.empty()) {
    const uint32_t bit = app.free_bits.back();
    app.free_bits.pop_back();
    return bit;
  }
  return app.bits < kMaxQpsPerApp ? app.bits++ : UINT32_MAX;
}

void ControlServer::give_doorbell_bit(uint32_t app_index, uint32_t app_id, uint32_t bit) {
  if (app_index < apps_.size() && apps_[app_index] && apps_[app_index]->id == app_id)
    apps_[app_index]->free_bits.push_back(bit);
}

bool ControlServer::take_pd_ref(uint32_t pd, uint32_t app_id) noexcept {
  const uint32_t i = handle_index(pd);
  if (i >= pds_.size() || !pds_[i].used || pds_[i].gen != handle_gen(pd) || pds_[i].app_id != app_id) return false;
  ++pds_[i].refs;
  return true;
}

void ControlServer::drop_pd_ref(uint32_t pd) noexcept {
  const uint32_t i = handle_index(pd);
  if (i < pds_.size() && pds_[i].used && pds_[i].refs > 0) --pds_[i].refs;
}

ControlServer::QpCtl* ControlServer::find_qp_ctl(uint32_t qpn) noexcept {
  uint32_t index = handle_index(qpn) - config_.qp_slot_base;  // below the base: wraps, found in no slot
  if (index >= qps_ctl_.size() || (qpn >> 24) != 0) return nullptr;
  QpCtl& qp = qps_ctl_[index];
  return qp.used && qp.gen == handle_gen(qpn) ? &qp : nullptr;
}

// The QP's state is the lcore's (it moves QPs to ERR on its own): the fast
// half checks and applies the transition, and its answer is the reply.
Status ControlServer::on_modify_qp(App& app, const Request& req, Reply* rep) {
  QpCtl* qp = find_qp_ctl(req.body.modify_qp.qpn);
  if (qp == nullptr || qp->app_id != app.id) return Status::kNotFound;
  ControlMsg m;
  m.kind = MsgKind::kQpModify;
  m.index = static_cast<uint32_t>(qp - qps_ctl_.data());
  m.modify = req.body.modify_qp;
  ControlResult r;
  if (!send_to_fast(m, &r)) return Status::kWorkerGone;
  if (static_cast<Status>(r.status) == Status::kOk) rep->body.modify_qp.qp_state = r.state;
  return static_cast<Status>(r.status);
}

// As modify_qp: the state is the lcore's (a QP it moved to ERR says ERR here).
Status ControlServer::on_query_qp(App& app, const Request& req, Reply* rep) {
  QpCtl* qp = find_qp_ctl(req.body.query_qp.qpn);
  if (qp == nullptr || qp->app_id != app.id) return Status::kNotFound;
  ControlMsg m;
  m.kind = MsgKind::kQpQuery;
  m.index = static_cast<uint32_t>(qp - qps_ctl_.data());
  m.info.qpn = req.body.query_qp.qpn;
  ControlResult r;
  if (!send_to_fast(m, &r)) return Status::kWorkerGone;
  if (static_cast<Status>(r.status) == Status::kOk) rep->body.modify_qp.qp_state = r.state;
  return static_cast<Status>(r.status);
}

// Control-side release, once the fast half dropped the QP.
void ControlServer::free_qp(uint32_t index, bool) {
  QpCtl& qp = qps_ctl_[index];
  ResourceAmounts* used = usage_of(qp.app_index, qp.app_id);
  quotas_->give(used, qp.account, Resource::kQps, 1);
  quotas_->give(used, qp.account, Resource::kQueueBytes, qp.charged_queue_bytes);
  qp.charged_queue_bytes = 0;
  if (qp.app_index < apps_.size() && apps_[qp.app_index] && apps_[qp.app_index]->id == qp.app_id) {
    App& app = *apps_[qp.app_index];
    app.free_bits.push_back(qp.doorbell_bit);
    --app.qps;
  }
  if (CqCtl* cq = find_cq_ctl(qp.send_cq); cq != nullptr && cq->refs > 0) --cq->refs;
  if (CqCtl* cq = find_cq_ctl(qp.recv_cq); cq != nullptr && cq->refs > 0) --cq->refs;
  if (SrqCtl* srq = qp.srq != 0 ? find_srq_ctl(qp.srq) : nullptr; srq != nullptr && srq->refs > 0) --srq->refs;
  qp.srq = 0;
  uint32_t pdi = handle_index(qp.pd);
  if (pdi < pds_.size() && pds_[pdi].used && pds_[pdi].refs > 0) --pds_[pdi].refs;
  retire(std::move(qp.memory));
  qp.used = false;
  free_qps_.push_back(index);
  --qp_count_;
}

Status ControlServer::on_destroy_qp(App& app, const Request& req) {
  QpCtl* qp = find_qp_ctl(req.body.destroy_qp.qpn);
  if (qp == nullptr || qp->app_id != app.id) return Status::kNotFound;
  auto index = static_cast<uint32_t>(qp - qps_ctl_.data());
  ControlMsg m;
  m.kind = MsgKind::kQpDestroy;
  m.index = index;
  if (!send_to_fast(m)) return Status::kWorkerGone;
  free_qp(index, false);
  return Status::kOk;
}

// ---------------------------------------------------------------- shared receive queues

ControlServer::SrqCtl* ControlServer::find_srq_ctl(uint32_t handle) noexcept {
  const uint32_t index = handle & 0xFFFF;
  if (index >= srqs_ctl_.size() || (handle >> 24) != 0) return nullptr;
  SrqCtl& s = srqs_ctl_[index];
  return s.used && s.gen == static_cast<uint8_t>(handle >> 16) ? &s : nullptr;
}

Status ControlServer::on_create_srq(App& app, uint32_t app_index, const Request& req, int* fds, std::size_t nfds,
                                 Reply* rep) {
  const CreateSrqRequest& c = req.body.create_srq;
  if (nfds != 1) return Status::kProtocolError;
  const uint32_t app_id = app.id;
  if (!is_power_of_two(c.depth) || c.depth > config_.max_queue_depth) return Status::kInvalidArgument;
  // A limit needs the event that reports it (v2), and cannot exceed the depth (verbs: EINVAL).
  const uint32_t limit = app.version >= 2 ? c.limit : 0;
  if (limit > c.depth) return Status::kInvalidArgument;
  // The transport's room (the port's core holds config_.max_srqs): refused here, not later
  // as its QPs failing.
  if (srq_count_ >= std::min(config_.max_srqs, kMaxSrqs)) return Status::kNoResources;
  // SRQs are charged like QPs: a count and their depth in bytes, before anything is made.
  if (!quotas_->take(app.used, app.account, Resource::kSrqs, 1)) return Status::kOverLimit;
  const SrqLayout layout = srq_layout(c.depth);
  ShmRegion region;
  Status st = ShmRegion::map_fd(fds[0], layout.bytes, layout.bytes + huge_page_size(), true, &region);
  fds[0] = -1;
  uint64_t queue_bytes = region.size() + sizeof(SrqCtl) + sizeof(FastPath::SrqSlot);
  if (config_.srq_worker_bytes) queue_bytes += config_.srq_worker_bytes(c.depth);
  bool charged = false;
  if (st == Status::kOk) {
    charged = quotas_->take(app.used, app.account, Resource::kQueueBytes, queue_bytes);
    if (!charged) st = Status::kOverByteLimit;
  }
  if (st == Status::kOk && !take_pd_ref(c.pd, app_id)) st = Status::kNotFound;
  const uint32_t bit = st == Status::kOk ? take_doorbell_bit(app) : UINT32_MAX;
  if (st == Status::kOk && bit == UINT32_MAX) {
    drop_pd_ref(c.pd);
    st = Status::kNoResources;  // the application's doorbell bits are all taken
  }
  if (st != Status::kOk) {
    if (charged) quotas_->give(&app.used, app.account, Resource::kQueueBytes, queue_bytes);
    quotas_->give(&app.used, app.account, Resource::kSrqs, 1);
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
  s.gen = next_gen(s.gen);
  s.app_id = app_id;
  s.app_index = app_index;
  s.pd = c.pd;
  s.doorbell_bit = bit;
  s.refs = 0;
  s.account = app.account;
  s.charged_queue_bytes = queue_bytes;
  const uint32_t handle = make_handle(s.gen, index);
  // The fast half's record, finished here: the lcore only stores it.
  ControlMsg m;
  m.kind = MsgKind::kSrqCreate;
  m.index = index;
  FastPath::SrqSlot& f = m.srq;
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
void ControlServer::free_srq(uint32_t index) {
  SrqCtl& s = srqs_ctl_[index];
  ResourceAmounts* used = usage_of(s.app_index, s.app_id);
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

Status ControlServer::on_destroy_srq(App& app, const Request& req) {
  SrqCtl* s = find_srq_ctl(req.body.destroy_srq.srq);
  if (s == nullptr || s->app_id != app.id) return Status::kNotFound;
  if (s->refs != 0) return Status::kBusy;  // verbs: EBUSY while QPs use it
  const auto index = static_cast<uint32_t>(s - srqs_ctl_.data());
  ControlMsg m;
  m.kind = MsgKind::kSrqDestroy;
  m.index = index;
  if (!send_to_fast(m)) return Status::kWorkerGone;
  free_srq(index);
  return Status::kOk;
}

Status ControlServer::on_modify_srq(App& app, const Request& req) {
  if (app.version < 2) return Status::kUnsupported;
  const ModifySrqRequest& r = req.body.modify_srq;
  SrqCtl* s = find_srq_ctl(r.srq);
  if (s == nullptr || s->app_id != app.id) return Status::kNotFound;
  ControlMsg m;
  m.kind = MsgKind::kSrqModify;
  m.index = static_cast<uint32_t>(s - srqs_ctl_.data());
  m.limit = r.limit;
  ControlResult res;
  if (!send_to_fast(m, &res)) return Status::kWorkerGone;
  return static_cast<Status>(res.status);
}

}  // namespace tandem::rnic::host
