// ControlServer (the control thread): the socket and its applications,
// attach and detach, the handoff to the fast half, and teardown of what the
// fast half let go of. The per-object handlers are in control_objects.cc.
#include "rnic/host/control_server.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "rnic/host/control_msg.h"
#include "rnic/host/control_records.h"
#include "rnic/host/host_link.h"
#include "rnic/host/unix_channel.h"

namespace tandem::rnic::host {

namespace {

constexpr uint64_t kTagListen = 0;
constexpr uint64_t kTagWake = 1;
constexpr uint64_t kTagFirstApp = 2;

}  // namespace

ControlServer::ControlServer(const ServerConfig& config) : config_(config), link_(std::make_unique<HostLink>()) {
  quotas_ = config_.quotas ? config_.quotas : std::make_shared<TenantQuotas>(config_.limits);
  link_->quotas = quotas_;
  link_->vnic_ips = std::move(config_.vnic_ips);  // the link's from now on (FastPath::set_vnic_ips)
  link_->vnic_owners = std::move(config_.vnic_owners);
  if (config_.qp_slot_base > 0xFFFF) throw std::invalid_argument("qp_slot_base past 16 bits");
  if (config_.max_qps > 0xFFFF - config_.qp_slot_base) config_.max_qps = 0xFFFF - config_.qp_slot_base;
  next_app_id_ = 1 + config_.qp_slot_base;  // the port's servers' application ids do not collide
  if (config_.max_cqs > 0xFFFF) config_.max_cqs = 0xFFFF;
  if (config_.max_mrs > kMaxMrs - 1) config_.max_mrs = kMaxMrs - 1;
  if (config_.max_queue_depth > kMaxQueueDepth) config_.max_queue_depth = kMaxQueueDepth;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    throw std::runtime_error(std::string("epoll/eventfd: ") + std::strerror(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTagWake;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  if (config_.listen) listen_on();
  // Shared by every application of the worker: they may read it, never write it.
  if (ShmRegion::create_peer_read_only("tandem-worker", sizeof(WorkerPage), &worker_page_) != Status::kOk) {
    throw std::runtime_error("cannot create the worker page (memfd)");
  }
  WorkerPage* page = reinterpret_cast<WorkerPage*>(worker_page_.data());
  page->magic = WorkerPage::kMagic;
  page->version = kProtocolVersionMax;
  page->sleeping.store(0, std::memory_order_relaxed);
  page->heartbeat_ns.store(0, std::memory_order_relaxed);
  page->port_active.store(1, std::memory_order_relaxed);
  link_->page = page;
  link_->wake_fd = wake_fd_;
}

void ControlServer::listen_on() {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (config_.socket_path.empty() || config_.socket_path.size() >= sizeof sa.sun_path) {
    throw std::runtime_error("host socket path empty or too long: '" + config_.socket_path + "'");
  }
  std::strcpy(sa.sun_path, config_.socket_path.c_str());
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  unlink(sa.sun_path);  // a stale socket file from a previous run
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      listen(listen_fd_, 128) != 0) {
    int e = errno;
    close(listen_fd_);
    throw std::runtime_error("cannot listen on " + config_.socket_path + ": " + std::strerror(e));
  }
  if (config_.check_owners && chmod(sa.sun_path, 0666) != 0) {  // SO_PEERCRED decides, not the mode
    int e = errno;
    close(listen_fd_);
    throw std::runtime_error("cannot open " + config_.socket_path + " to all users: " + std::strerror(e));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTagListen;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
}

ControlServer::~ControlServer() {
  for (auto& a : apps_) {
    if (a && a->sock >= 0) close(a->sock);
  }
  for (auto& cq : cqs_ctl_) {
    if (cq.event_fd >= 0) close(cq.event_fd);
  }
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(config_.socket_path.c_str());
  }
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

// ---------------------------------------------------------------- the handoff

bool ControlServer::send_to_fast(ControlMsg& msg, ControlResult* result) {
  msg.seq = ++sent_seq_;
  // Sleep, never spin or yield: the control thread shares a core with other
  // busy pollers (the fabric's lcore in the lab), and a yield loop while the
  // lcore is descheduled steals that core by the millisecond. The lcore looks
  // at the queue every iteration; an answer comes within one of them.
  auto backoff = [] {
    timespec ts{0, 50'000};
    nanosleep(&ts, nullptr);
  };
  while (!link_->to_fast.push(msg)) {
    if (stopping_.load(std::memory_order_acquire)) return false;
    backoff();
  }
  if (!threaded_ && link_->apply_here) link_->apply_here(now_);
  ControlResult r;
  for (;;) {
    if (link_->to_ctl.pop(&r)) {
      if (r.seq == msg.seq) break;
      continue;  // an answer to a message we gave up on
    }
    if (stopping_.load(std::memory_order_acquire)) return false;
    backoff();
  }
  // Retirements that follow count their grace from when the lcore let go,
  // not from the start of this round (now_ may predate a long epoll_wait).
  if (r.applied_ns > now_) now_ = r.applied_ns;
  if (result != nullptr) *result = r;
  return true;
}

// ---------------------------------------------------------------- control path

void ControlServer::serve_control(uint64_t now, int timeout_ms) {
  now_ = now;
  // A few device unmaps per round, the sockets between: one rte_extmem_unregister
  // of 4 KiB pages can take seconds; requests should not queue behind a pile of them.
  const bool more = release_retired(4);
  epoll_event evs[64];
  // Wake up for the next silent connection's deadline, not only for events.
  if (silent_count_ > 0 && timeout_ms > 100) timeout_ms = 100;
  int n = epoll_wait(epoll_fd_, evs, 64, more ? 0 : timeout_ms);
  for (int i = 0; i < n; ++i) {
    uint64_t tag = evs[i].data.u64;
    if (tag == kTagListen) {
      accept_apps();
    } else if (tag == kTagWake) {
      uint64_t v;
      while (read(wake_fd_, &v, sizeof v) == sizeof v) {
      }
    } else {
      uint32_t index = static_cast<uint32_t>(tag - kTagFirstApp);
      if (index < apps_.size() && apps_[index]) serve(index);
    }
  }
  if (silent_count_ > 0) expire_silent();
}

void ControlServer::expire_silent() {
  for (uint32_t i = 0; i < apps_.size(); ++i) {
    const App* a = apps_[i].get();
    if (a != nullptr && !a->hello_done && now_ - a->accepted_ns >= config_.hello_timeout_ns) {
      count(link_->silent_timeouts);
      drop_app(i, false);
    }
  }
}

bool ControlServer::evict_silent(uint32_t uid, bool any_uid) {
  uint32_t oldest = UINT32_MAX;
  for (uint32_t i = 0; i < apps_.size(); ++i) {
    const App* a = apps_[i].get();
    if (a == nullptr || a->hello_done || (!any_uid && a->uid != uid)) continue;
    char b;
    if (recv(a->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0) continue;  // its hello is waiting: not silent
    if (oldest == UINT32_MAX || a->accepted_ns < apps_[oldest]->accepted_ns) oldest = i;
  }
  if (oldest == UINT32_MAX) return false;
  count(link_->silent_evicted);
  drop_app(oldest, false);
  return true;
}

bool ControlServer::release_retired(int budget) {
  const uint64_t consumed = link_->consumed_seq.load(std::memory_order_acquire);
  for (auto it = retired_.begin(); it != retired_.end();) {
    Retired& r = *it;
    // The lcore has not caught up yet: nor has it for anything retired later.
    if (r.seq > consumed) break;
    if (r.mr_index != UINT32_MAX && config_.mr_in_flight && config_.mr_in_flight(r.mr_index)) {
      ++it;  // the NIC still reads it; what follows need not wait for that
      continue;
    }
    // The device lets go first, then the pages go. Only the device's side is slow.
    if (r.device_mapped && config_.mapper != nullptr) {
      if (budget-- == 0) return true;
      config_.mapper->unmap(r.region.data());
    }
    if (r.mr_index != UINT32_MAX) free_mrs_.push_back(r.mr_index);
    retired_bytes_.fetch_sub(r.region.size(), std::memory_order_relaxed);
    it = retired_.erase(it);
  }
  return false;
}

void ControlServer::accept_apps() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    ControlServer* to = config_.place ? config_.place() : nullptr;
    (to != nullptr ? to : this)->adopt(fd);
  }
}

void ControlServer::adopt(int fd) {
  auto app = std::make_unique<App>();
  app->sock = fd;
  app->accepted_ns = now_;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    app->pid = static_cast<uint32_t>(cred.pid);
    app->uid = cred.uid;
    app->gid = cred.gid;
    app->cred_known = true;
  }
  // Silent connections cost a slot each: one uid keeps a few, and a full table makes room
  // by closing a silent one rather than refusing a newcomer.
  if (silent_count_ > 0) {
    std::size_t mine = 0;
    for (const auto& a : apps_)
      if (a && !a->hello_done && a->uid == app->uid) ++mine;
    if (mine >= config_.max_silent_per_uid) evict_silent(app->uid, false);
  }
  if (app_count() >= config_.max_apps && !evict_silent(0, true)) {
    close(fd);
    count(link_->requests_refused);
    return;
  }
  uint32_t index = 0;
  while (index < apps_.size() && apps_[index]) ++index;
  if (index == apps_.size()) apps_.emplace_back();
  app->id = next_app_id_++;
  app->index = index;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTagFirstApp + index;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    close(fd);
    return;
  }
  apps_[index] = std::move(app);
  ++silent_count_;
}

void ControlServer::serve(uint32_t app_index) {
  for (int budget = 0; budget < 16; ++budget) {
    App& app = *apps_[app_index];
    Request req{};
    int fds[kMaxFdsPerMessage];
    std::size_t nfds = 0;
    ssize_t n = recv_message(app.sock, &req, sizeof req, fds, kMaxFdsPerMessage, &nfds, true);
    if (n == -EAGAIN || n == -EWOULDBLOCK) return;
    if (n <= 0 && n != -EMSGSIZE) {  // end of stream or reset: the application is gone
      drop_app(app_index, true);
      return;
    }
    bool malformed = n != static_cast<ssize_t>(sizeof req) || req.hdr.magic != kProtocolMagic ||
                     (!app.hello_done && req.hdr.type != static_cast<uint16_t>(MsgType::kHello));
    if (malformed) {
      for (std::size_t i = 0; i < nfds; ++i) close(fds[i]);
      count(link_->protocol_errors);
      drop_app(app_index, true);
      return;
    }
    Reply rep{};
    rep.hdr.magic = kProtocolMagic;
    rep.hdr.type = req.hdr.type;
    rep.hdr.seq = req.hdr.seq;
    int rfds[kMaxFdsPerMessage];
    std::size_t nrfds = 0;
    handle(app_index, req, fds, nfds, &rep, rfds, &nrfds);
    for (std::size_t i = 0; i < nfds; ++i) {
      if (fds[i] >= 0) close(fds[i]);  // descriptors no handler took
    }
    if (rep.hdr.status != 0) count(link_->requests_refused);
    if (send_message(app.sock, &rep, sizeof rep, rfds, nrfds) != static_cast<ssize_t>(sizeof rep)) {
      drop_app(app_index, true);
      return;
    }
    if (!app.hello_done) {  // a refused hello (version mismatch): the answer was the last word
      drop_app(app_index, false);
      return;
    }
  }
}

void ControlServer::handle(uint32_t app_index, const Request& req, int* fds, std::size_t nfds,
                        Reply* rep, int* rfds, std::size_t* nrfds) {
  App& app = *apps_[app_index];
  Status st;
  switch (static_cast<MsgType>(req.hdr.type)) {
    case MsgType::kHello:
      st = app.hello_done ? Status::kProtocolError
                          : on_hello(app, app_index, req, fds, nfds, rep, rfds, nrfds);
      break;
    case MsgType::kAllocPd:
      st = on_alloc_pd(app, rep);
      break;
    case MsgType::kDeallocPd:
      st = on_dealloc_pd(app, req);
      break;
    case MsgType::kRegMr:
      st = on_reg_mr(app, req, fds, nfds, rep);
      break;
    case MsgType::kDeregMr:
      st = on_dereg_mr(app, req);
      break;
    case MsgType::kCreateCq:
      st = on_create_cq(app, req, fds, nfds, rep);
      break;
    case MsgType::kDestroyCq:
      st = on_destroy_cq(app, req);
      break;
    case MsgType::kCreateQp:
      st = on_create_qp(app, app_index, req, fds, nfds, rep);
      break;
    case MsgType::kModifyQp:
      st = on_modify_qp(app, req, rep);
      break;
    case MsgType::kDestroyQp:
      st = on_destroy_qp(app, req);
      break;
    case MsgType::kCreateSrq:
      st = on_create_srq(app, app_index, req, fds, nfds, rep);
      break;
    case MsgType::kDestroySrq:
      st = on_destroy_srq(app, req);
      break;
    case MsgType::kQueryQp:
      st = on_query_qp(app, req, rep);
      break;
    case MsgType::kAsyncEvents:
      st = on_async_events(app, app_index, fds, nfds);
      break;
    case MsgType::kModifySrq:
      st = on_modify_srq(app, req);
      break;
    case MsgType::kReregMr:
      st = app.version >= 2 ? on_rereg_mr(app, req) : Status::kUnsupported;
      break;
    case MsgType::kResizeCq:
      st = app.version >= 2 ? on_resize_cq(app, req, fds, nfds) : Status::kUnsupported;
      break;
    default:
      st = Status::kUnsupported;
      break;
  }
  rep->hdr.status = static_cast<uint32_t>(st);
}

// Control half; the vNIC list and owners are set by the lcore (DPU mode), hence the lock.
bool ControlServer::may_attach(const App& app, uint32_t vnic_ip) {
  if (!config_.check_owners) return true;  // the socket's file permissions decided
  if (!app.cred_known) return false;
  if (app.uid == 0 || app.uid == geteuid()) return true;
  std::lock_guard<std::mutex> g(link_->vnic_mu);
  const auto admitted = [&](uint32_t ip) {
    for (const VnicOwner& o : link_->vnic_owners)
      if (o.vnic_ip == ip && (o.uid == app.uid || (o.gid >= 0 && o.gid == app.gid))) return true;
    return false;
  };
  if (vnic_ip != 0) return admitted(vnic_ip);
  for (uint32_t ip : link_->vnic_ips)  // unbound: it could use any of them
    if (!admitted(ip)) return false;
  return !link_->vnic_ips.empty();
}

Status ControlServer::on_hello(App& app, uint32_t app_index, const Request& req, int* fds,
                            std::size_t nfds, Reply* rep, int* rfds, std::size_t* nrfds) {
  const HelloRequest& h = req.body.hello;
  uint16_t version = std::min(h.version_max, kProtocolVersionMax);
  if (version < std::max(h.version_min, kProtocolVersionMin)) return Status::kVersionMismatch;
  if (nfds != 1) return Status::kProtocolError;
  if (h.vnic_ip != 0) {
    std::lock_guard<std::mutex> g(link_->vnic_mu);
    if (std::find(link_->vnic_ips.begin(), link_->vnic_ips.end(), h.vnic_ip) ==
        link_->vnic_ips.end())
      return Status::kNoSuchVnic;
  }
  if (!may_attach(app, h.vnic_ip)) {
    count(link_->attach_denied);
    return Status::kAccessDenied;
  }
  app.account = quotas_->account(h.vnic_ip);
  if (app.account == TenantQuotas::kNoAccount) return Status::kNoResources;
  Status st = ShmRegion::map_fd(fds[0], sizeof(DoorbellPage), 1u << 20, true, &app.doorbell_memory);
  fds[0] = -1;
  if (st != Status::kOk) return st;
  mapped_bytes_ += app.doorbell_memory.size();
  app.version = version;
  app.vnic_ip = h.vnic_ip;
  std::memcpy(app.name, h.name, sizeof app.name);
  app.name[sizeof app.name - 1] = '\0';
  ControlMsg m;
  m.kind = MsgKind::kAttach;
  m.index = app_index;
  m.app_id = app.id;
  m.doorbells = reinterpret_cast<DoorbellPage*>(app.doorbell_memory.data());
  if (!send_to_fast(m)) return Status::kWorkerGone;
  app.hello_done = true;
  --silent_count_;
  HelloReply& r = rep->body.hello;
  r.version = version;
  r.app_id = app.id;
  r.max_qps = kMaxQpsPerApp;
  r.max_sge = kMaxSge;
  r.max_inline = kMaxInline;
  r.max_queue_depth = config_.max_queue_depth;
  r.worker_pid = static_cast<uint32_t>(getpid());
  rfds[0] = worker_page_.fd();
  rfds[1] = wake_fd_;
  *nrfds = 2;
  return Status::kOk;
}

// v2: the application's asynchronous event ring and the eventfd to kick (once).
Status ControlServer::on_async_events(App& app, uint32_t app_index, int* fds, std::size_t nfds) {
  if (app.version < 2) return Status::kUnsupported;
  if (nfds != 2) return Status::kProtocolError;
  if (app.event_memory.valid()) return Status::kBusy;
  if (!is_eventfd(fds[1])) return Status::kInvalidArgument;  // a write must never block the lcore
  const AsyncEventLayout layout = async_event_layout();
  ShmRegion region;
  const Status st = ShmRegion::map_fd(fds[0], layout.bytes, layout.bytes + huge_page_size(), true, &region);
  fds[0] = -1;
  if (st != Status::kOk) return st;
  uint8_t* base = region.data();
  ControlMsg m;
  m.kind = MsgKind::kEvents;
  m.index = app_index;
  m.app_id = app.id;
  m.event_ring = RingWriter<AsyncEvent>(reinterpret_cast<RingControl*>(base + layout.control),
                                        reinterpret_cast<AsyncEvent*>(base + layout.entries), kAsyncEventDepth);
  m.event_stats = reinterpret_cast<AsyncEventStats*>(base + layout.stats);
  m.event_fd = fds[1];
  fds[1] = -1;
  app.event_fd = m.event_fd;
  mapped_bytes_ += region.size();
  app.event_memory = std::move(region);
  if (!send_to_fast(m)) return Status::kWorkerGone;
  return Status::kOk;
}

void ControlServer::drop_app(uint32_t app_index, bool died) {
  App& app = *apps_[app_index];
  uint32_t id = app.id;
  if (!app.hello_done) --silent_count_;
  if (app.hello_done) {
    // One message: the fast half flushes and forgets the application's QPs,
    // SRQs, CQs and MRs; only then are their mappings retired here.
    ControlMsg m;
    m.kind = MsgKind::kDetach;
    m.index = app_index;
    m.app_id = id;
    m.died = died;
    send_to_fast(m);  // if the lcore stopped, everything is torn down with the server anyway
  }
  // QPs first (they hold CQ and PD references), then CQs, MRs and PDs.
  for (uint32_t i = 0; i < qps_ctl_.size(); ++i) {
    if (qps_ctl_[i].used && qps_ctl_[i].app_id == id) free_qp(i, died);
  }
  for (uint32_t i = 0; i < srqs_ctl_.size(); ++i) {
    if (srqs_ctl_[i].used && srqs_ctl_[i].app_id == id) free_srq(i);  // after its QPs
  }
  for (uint32_t i = 0; i < cqs_ctl_.size(); ++i) {
    if (cqs_ctl_[i].used && cqs_ctl_[i].app_id == id) free_cq(i);
  }
  for (uint32_t i = 0; i < mrs_ctl_.size(); ++i) {
    if (mrs_ctl_[i].used && mrs_ctl_[i].app_id == id) free_mr(i);
  }
  for (uint32_t i = 0; i < pds_.size(); ++i) {
    if (pds_[i].used && pds_[i].app_id == id) free_pd(i);
  }
  if (app.doorbell_memory.valid()) retire(std::move(app.doorbell_memory));
  if (app.event_memory.valid()) retire(std::move(app.event_memory));
  if (app.event_fd >= 0) close(app.event_fd);  // the lcore let go of it at kDetach
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, app.sock, nullptr);
  close(app.sock);
  apps_[app_index].reset();
}

void ControlServer::retire(ShmRegion&& region, bool device_mapped, uint32_t mr_index) {
  if (!region.valid()) {
    if (mr_index != UINT32_MAX) free_mrs_.push_back(mr_index);
    return;
  }
  mapped_bytes_ -= region.size();
  retired_bytes_ += region.size();
  retired_.push_back(Retired{std::move(region), sent_seq_, device_mapped, mr_index});
}

// ---------------------------------------------------------------- accounting

std::size_t ControlServer::app_count() const noexcept {
  std::size_t n = 0;
  for (auto& a : apps_) n += a ? 1 : 0;
  return n;
}
std::size_t ControlServer::list_apps(std::span<AppInfo> out) const noexcept {
  std::size_t n = 0;
  for (auto& a : apps_) {
    if (!a || !a->hello_done) continue;
    if (n == out.size()) break;
    AppInfo& i = out[n++];
    i.app_id = a->id;
    i.pid = a->pid;
    std::memcpy(i.name, a->name, sizeof i.name);
    i.version = a->version;
    i.qps = a->qps;
    i.vnic_ip = a->vnic_ip;
  }
  return n;
}

HostMemory ControlServer::memory() const noexcept {
  HostMemory m{};
  m.qps = qp_count_;
  m.table_bytes = qps_ctl_.capacity() * sizeof(QpCtl) + free_qps_.capacity() * sizeof(uint32_t) +
                  cqs_ctl_.capacity() * sizeof(CqCtl) + free_cqs_.capacity() * sizeof(uint32_t) +
                  mrs_ctl_.capacity() * sizeof(MrCtl) + free_mrs_.capacity() * sizeof(uint32_t) +
                  pds_.capacity() * sizeof(PdSlot) + free_pds_.capacity() * sizeof(uint32_t) +
                  apps_.capacity() * sizeof(void*) + srqs_ctl_.capacity() * sizeof(SrqCtl) +
                  free_srqs_.capacity() * sizeof(uint32_t);
  for (auto& a : apps_) {
    if (a) m.table_bytes += sizeof(App) + a->free_bits.capacity() * sizeof(uint32_t);
  }
  m.mapped_bytes = mapped_bytes_.load(std::memory_order_relaxed);
  m.retired_bytes = retired_bytes_.load(std::memory_order_relaxed);
  m.bytes_per_qp_slot = sizeof(QpCtl);
  return m;
}

const TenantQuotas& ControlServer::quotas() const noexcept { return *quotas_; }

}  // namespace tandem::rnic::host
