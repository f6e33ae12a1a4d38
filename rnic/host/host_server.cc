#include "rnic/host/host_server.h"

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
#include "rnic/host/wqe_fetch.h"
#include "rnic/host/srq_slot.h"
#include "rnic/host/unix_channel.h"

namespace tandem::rnic::host {

// ---- control half's records (the control thread's only)

struct HostServer::App {
  uint32_t id = 0;
  uint32_t index = 0;  // in apps_
  int sock = -1;
  uint32_t pid = 0;
  uint32_t uid = 0, gid = 0;  // the peer's, from SO_PEERCRED at accept
  bool cred_known = false;
  char name[32] = {};
  bool hello_done = false;
  uint64_t accepted_ns = 0;  // now_ at accept: a silent connection is closed hello_timeout_ns later
  uint16_t version = 0;
  uint32_t vnic_ip = 0;
  ShmRegion doorbell_memory;
  uint32_t bits = 0;  // doorbell bits handed out so far
  std::vector<uint32_t> free_bits;
  uint32_t qps = 0;
  uint32_t account = TenantQuotas::kNoAccount;  // its vNIC's (set at hello)
  ResourceAmounts used{};                        // what it holds against ServerConfig::limits
  ShmRegion event_memory;  // v2: its asynchronous event ring (kAsyncEvents)
  int event_fd = -1;       // and the eventfd the worker kicks (closed after the lcore let go)
};

struct HostServer::QpCtl {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t app_index = 0;
  uint32_t doorbell_bit = 0;
  uint32_t pd = 0;
  uint32_t send_cq = 0;
  uint32_t recv_cq = 0;
  uint32_t srq = 0;  // the SRQ it holds a reference on; 0: none
  uint32_t account = TenantQuotas::kNoAccount;
  uint64_t charged_queue_bytes = 0;  // taken from the quotas at create
  ShmRegion memory;
};

struct HostServer::CqCtl {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t refs = 0;  // QPs using it
  int event_fd = -1;  // the application's completion channel, or -1 (closed here, after the lcore let go)
  uint32_t app_index = 0;
  uint32_t account = TenantQuotas::kNoAccount;
  uint64_t charged_queue_bytes = 0;  // taken from the quotas at create
  ShmRegion memory;
};

struct HostServer::MrCtl {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t pd = 0;
  bool device_mapped = false;  // given to config_.mapper
  uint32_t app_index = 0;
  uint32_t account = TenantQuotas::kNoAccount;
  uint64_t charged_bytes = 0;  // taken from the quotas (the mapping's size)
  ShmRegion memory;
};

struct HostServer::PdSlot {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t refs = 0;  // MRs and QPs in it
  uint32_t app_index = 0;
  uint32_t account = TenantQuotas::kNoAccount;
};

// ---- fast half's records (the data lcore's only)

struct HostServer::FastApp {
  uint32_t id = 0;
  DoorbellPage* doorbells = nullptr;
  std::vector<uint32_t> qpn_by_bit;  // doorbell bit -> QPN (0: free)
  RingWriter<AsyncEvent> events;     // v2: its asynchronous event ring (depth 0: none)
  AsyncEventStats* event_stats = nullptr;
  int event_fd = -1;
  uint32_t deferred = 0;             // events pending on its objects (their pending_events bits)
  uint8_t pending_port = 0;          // kPendPort: the port's state changed while its ring was full
};

struct HostServer::CqSlot {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t app_index = 0;
  uint8_t pending_events = 0;  // kPendCqErr: raised while its application's ring was full
  RingWriter<Cqe> ring;
  CqNotify* notify = nullptr;
  uint64_t* timestamps = nullptr;  // v2 CQs with timestamps: beside the ring, one per slot
  int event_fd = -1;
  bool overrun = false;  // a completion found it full: in error, takes nothing more
};

struct HostServer::MrSlot {
  bool used = false;
  uint8_t gen = 0;
  uint32_t app_id = 0;
  uint32_t pd = 0;
  uint32_t access = 0;
  uint64_t addr = 0;  // application virtual address (what peers put in RETH)
  uint64_t length = 0;
  uint8_t* base = nullptr;  // worker address of addr
};

namespace {

constexpr uint64_t kTagListen = 0;
constexpr uint64_t kTagWake = 1;
constexpr uint64_t kTagFirstApp = 2;

// Handles: generation (1..255) << 16 | slot. Generation 0 is never used, so
// a QPN is never 0 or 1 (the special QPs of InfiniBand).
constexpr uint32_t make_handle(uint8_t gen, uint32_t index) noexcept {
  return (uint32_t{gen} << 16) | index;
}
constexpr uint32_t handle_index(uint32_t h) noexcept { return h & 0xFFFF; }
constexpr uint8_t handle_gen(uint32_t h) noexcept { return static_cast<uint8_t>(h >> 16); }
constexpr uint32_t make_key(uint8_t gen, uint32_t index) noexcept { return index << 8 | gen; }

uint8_t next_gen(uint8_t g) noexcept { return g == 255 ? 1 : static_cast<uint8_t>(g + 1); }

template <typename Slot>
uint32_t alloc_slot(std::vector<Slot>& slots, std::vector<uint32_t>& free_list, uint32_t limit) {
  uint32_t index;
  if (!free_list.empty()) {
    index = free_list.back();
    free_list.pop_back();
  } else {
    if (slots.size() >= limit) return UINT32_MAX;
    index = static_cast<uint32_t>(slots.size());
    slots.emplace_back();
  }
  Slot& s = slots[index];
  s.used = true;
  s.gen = next_gen(s.gen);
  return index;
}

// The completion channel fd must be an eventfd: a write to anything else
// (a full pipe...) could block the worker. Made non-blocking for the same reason.
bool is_eventfd(int fd) noexcept {
  char link[64];
  char target[64];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  if (std::strcmp(target, "anon_inode:[eventfd]") != 0) return false;
  int fl = fcntl(fd, F_GETFL);
  return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

// Shared memory may change under us: take one copy, then look only at it.
template <typename T>
void copy_from_shared(T* dst, const T* src) noexcept {
  std::memcpy(dst, src, sizeof(T));
  asm volatile("" ::: "memory");
}

// The usage of the application at `index` if it is still `id` (else it is
// gone, and only its vNIC gets the resource back).
ResourceAmounts* usage_of(std::vector<std::unique_ptr<HostServer::App>>& apps, uint32_t index, uint32_t id) noexcept {
  return index < apps.size() && apps[index] && apps[index]->id == id ? &apps[index]->used : nullptr;
}

}  // namespace

HostServer::HostServer(const ServerConfig& config)
    : config_(config),
      to_fast_(std::make_unique<SpscQueue<ControlMsg, 64>>()),
      to_ctl_(std::make_unique<SpscQueue<ControlResult, 64>>()) {
  quotas_ = config_.quotas ? config_.quotas : std::make_shared<TenantQuotas>(config_.limits);
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
  page_ = reinterpret_cast<WorkerPage*>(worker_page_.data());
  page_->magic = WorkerPage::kMagic;
  page_->version = kProtocolVersionMax;
  page_->sleeping.store(0, std::memory_order_relaxed);
  page_->heartbeat_ns.store(0, std::memory_order_relaxed);
  page_->port_active.store(1, std::memory_order_relaxed);
}

void HostServer::listen_on() {
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

HostServer::~HostServer() {
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

void HostServer::poll(uint64_t now) {
  apply_control(now);
  serve_control(now, 0);
}

// ---------------------------------------------------------------- the handoff

bool HostServer::send_to_fast(ControlMsg& msg, ControlResult* result) {
  msg.seq = ++sent_seq_;
  // Sleep, never spin or yield: the control thread shares a core with other
  // busy pollers (the fabric's lcore in the lab), and a yield loop while the
  // lcore is descheduled steals that core by the millisecond. The lcore looks
  // at the queue every iteration; an answer comes within one of them.
  auto backoff = [] {
    timespec ts{0, 50'000};
    nanosleep(&ts, nullptr);
  };
  while (!to_fast_->push(msg)) {
    if (stopping_.load(std::memory_order_acquire)) return false;
    backoff();
  }
  if (!threaded_) apply_control(now_);
  ControlResult r;
  for (;;) {
    if (to_ctl_->pop(&r)) {
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

uint32_t HostServer::apply_control(uint64_t now) noexcept {
  fast_now_ = now;  // completion timestamps are this iteration's time
  uint32_t n = 0;
  ControlMsg m;
  // Nothing left from earlier messages: the port acted on all of it.
  if (events_.empty()) consumed_seq_.store(applied_seq_, std::memory_order_release);
  while (to_fast_->pop(&m)) {
    ControlResult r;
    r.seq = m.seq;
    r.applied_ns = now;
    apply(m, &r);
    applied_seq_ = m.seq;
    while (!to_ctl_->push(r)) {
      // Cannot happen (one message in flight), but never drop an answer.
    }
    ++n;
  }
  if (deferred_apps_ != 0) [[unlikely]] flush_deferred();
  if (now - last_beat_ >= 20'000) {
    page_->heartbeat_ns.store(now, std::memory_order_relaxed);
    last_beat_ = now;
  }
  return n;
}

// ---------------------------------------------------------------- control path

void HostServer::serve_control(uint64_t now, int timeout_ms) {
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

void HostServer::expire_silent() {
  for (uint32_t i = 0; i < apps_.size(); ++i) {
    const App* a = apps_[i].get();
    if (a != nullptr && !a->hello_done && now_ - a->accepted_ns >= config_.hello_timeout_ns) {
      count_ctl(ctl_silent_timeouts_);
      drop_app(i, false);
    }
  }
}

bool HostServer::evict_silent(uint32_t uid, bool any_uid) {
  uint32_t oldest = UINT32_MAX;
  for (uint32_t i = 0; i < apps_.size(); ++i) {
    const App* a = apps_[i].get();
    if (a == nullptr || a->hello_done || (!any_uid && a->uid != uid)) continue;
    char b;
    if (recv(a->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0) continue;  // its hello is waiting: not silent
    if (oldest == UINT32_MAX || a->accepted_ns < apps_[oldest]->accepted_ns) oldest = i;
  }
  if (oldest == UINT32_MAX) return false;
  count_ctl(ctl_silent_evicted_);
  drop_app(oldest, false);
  return true;
}

bool HostServer::release_retired(int budget) {
  const uint64_t consumed = consumed_seq_.load(std::memory_order_acquire);
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

void HostServer::accept_apps() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    HostServer* to = config_.place ? config_.place() : nullptr;
    (to != nullptr ? to : this)->adopt(fd);
  }
}

void HostServer::adopt(int fd) {
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
    count_ctl(ctl_requests_refused_);
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

void HostServer::serve(uint32_t app_index) {
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
      count_ctl(ctl_protocol_errors_);
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
    if (rep.hdr.status != 0) count_ctl(ctl_requests_refused_);
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

void HostServer::handle(uint32_t app_index, const Request& req, int* fds, std::size_t nfds,
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
    default:
      st = Status::kUnsupported;
      break;
  }
  rep->hdr.status = static_cast<uint32_t>(st);
}

// Control half; the vNIC list and owners are set by the lcore (DPU mode), hence the lock.
bool HostServer::may_attach(const App& app, uint32_t vnic_ip) {
  if (!config_.check_owners) return true;  // the socket's file permissions decided
  if (!app.cred_known) return false;
  if (app.uid == 0 || app.uid == geteuid()) return true;
  std::lock_guard<std::mutex> g(vnic_mu_);
  const auto admitted = [&](uint32_t ip) {
    for (const VnicOwner& o : config_.vnic_owners)
      if (o.vnic_ip == ip && (o.uid == app.uid || (o.gid >= 0 && o.gid == app.gid))) return true;
    return false;
  };
  if (vnic_ip != 0) return admitted(vnic_ip);
  for (uint32_t ip : config_.vnic_ips)  // unbound: it could use any of them
    if (!admitted(ip)) return false;
  return !config_.vnic_ips.empty();
}

Status HostServer::on_hello(App& app, uint32_t app_index, const Request& req, int* fds,
                            std::size_t nfds, Reply* rep, int* rfds, std::size_t* nrfds) {
  const HelloRequest& h = req.body.hello;
  uint16_t version = std::min(h.version_max, kProtocolVersionMax);
  if (version < std::max(h.version_min, kProtocolVersionMin)) return Status::kVersionMismatch;
  if (nfds != 1) return Status::kProtocolError;
  if (h.vnic_ip != 0) {
    std::lock_guard<std::mutex> g(vnic_mu_);
    if (std::find(config_.vnic_ips.begin(), config_.vnic_ips.end(), h.vnic_ip) ==
        config_.vnic_ips.end())
      return Status::kNoSuchVnic;
  }
  if (!may_attach(app, h.vnic_ip)) {
    count_ctl(ctl_attach_denied_);
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
Status HostServer::on_async_events(App& app, uint32_t app_index, int* fds, std::size_t nfds) {
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

Status HostServer::on_alloc_pd(App& app, Reply* rep) {
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

Status HostServer::on_dealloc_pd(App& app, const Request& req) {
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
Status HostServer::on_reg_mr(App& app, const Request& req, int* fds, std::size_t nfds, Reply* rep) {
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

HostServer::MrCtl* HostServer::find_mr_ctl(uint32_t key) noexcept {
  uint32_t index = key >> 8;
  if (index >= mrs_ctl_.size()) return nullptr;
  MrCtl& mr = mrs_ctl_[index];
  return mr.used && mr.gen == static_cast<uint8_t>(key) ? &mr : nullptr;
}

// Control-side release, once the fast half no longer has the MR: the
// mapping (and the device's) and the slot go once nothing can touch them.
void HostServer::free_mr(uint32_t index) {
  MrCtl& mr = mrs_ctl_[index];
  uint32_t pdi = handle_index(mr.pd);
  if (pdi < pds_.size() && pds_[pdi].used && pds_[pdi].refs > 0) --pds_[pdi].refs;
  retire(std::move(mr.memory), mr.device_mapped, index);
  ResourceAmounts* used = usage_of(apps_, mr.app_index, mr.app_id);
  quotas_->give(used, mr.account, Resource::kMrs, 1);
  quotas_->give(used, mr.account, Resource::kBytes, mr.charged_bytes);
  mr.charged_bytes = 0;
  mr.used = false;
  mr.device_mapped = false;
  --mr_count_;
}

void HostServer::free_pd(uint32_t index) {
  PdSlot& pd = pds_[index];
  quotas_->give(usage_of(apps_, pd.app_index, pd.app_id), pd.account, Resource::kPds, 1);
  pd.used = false;
  free_pds_.push_back(index);
}

Status HostServer::on_dereg_mr(App& app, const Request& req) {
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

Status HostServer::on_create_cq(App& app, const Request& req, int* fds, std::size_t nfds,
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
  const uint64_t queue_bytes = region.size() + sizeof(CqCtl) + sizeof(CqSlot);
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

HostServer::CqCtl* HostServer::find_cq_ctl(uint32_t handle) noexcept {
  uint32_t index = handle_index(handle);
  if (index >= cqs_ctl_.size()) return nullptr;
  CqCtl& cq = cqs_ctl_[index];
  return cq.used && cq.gen == handle_gen(handle) ? &cq : nullptr;
}

// Control-side release, once the fast half no longer writes the CQ.
void HostServer::free_cq(uint32_t index) {
  CqCtl& cq = cqs_ctl_[index];
  retire(std::move(cq.memory));
  if (cq.event_fd >= 0) close(cq.event_fd);
  cq.event_fd = -1;
  ResourceAmounts* used = usage_of(apps_, cq.app_index, cq.app_id);
  quotas_->give(used, cq.account, Resource::kCqs, 1);
  quotas_->give(used, cq.account, Resource::kQueueBytes, cq.charged_queue_bytes);
  cq.charged_queue_bytes = 0;
  cq.used = false;
  free_cqs_.push_back(index);
  --cq_count_;
}

Status HostServer::on_destroy_cq(App& app, const Request& req) {
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

Status HostServer::on_create_qp(App& app, uint32_t app_index, const Request& req, int* fds,
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
  uint64_t queue_bytes = region.size() + sizeof(QpCtl) + sizeof(QpSlot);
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

uint32_t HostServer::app_id_of(const App& app) noexcept { return app.id; }
ResourceAmounts& HostServer::app_usage(App& app) noexcept { return app.used; }
uint32_t HostServer::app_account(const App& app) noexcept { return app.account; }
ResourceAmounts* HostServer::usage_of_app(uint32_t index, uint32_t id) noexcept { return usage_of(apps_, index, id); }
uint16_t HostServer::version_of(const App& app) noexcept { return app.version; }

uint32_t HostServer::take_doorbell_bit(App& app) noexcept {
  if (!app.free_bits.empty()) {
    const uint32_t bit = app.free_bits.back();
    app.free_bits.pop_back();
    return bit;
  }
  return app.bits < kMaxQpsPerApp ? app.bits++ : UINT32_MAX;
}

void HostServer::give_doorbell_bit(uint32_t app_index, uint32_t app_id, uint32_t bit) {
  if (app_index < apps_.size() && apps_[app_index] && apps_[app_index]->id == app_id)
    apps_[app_index]->free_bits.push_back(bit);
}

bool HostServer::take_pd_ref(uint32_t pd, uint32_t app_id) noexcept {
  const uint32_t i = handle_index(pd);
  if (i >= pds_.size() || !pds_[i].used || pds_[i].gen != handle_gen(pd) || pds_[i].app_id != app_id) return false;
  ++pds_[i].refs;
  return true;
}

void HostServer::drop_pd_ref(uint32_t pd) noexcept {
  const uint32_t i = handle_index(pd);
  if (i < pds_.size() && pds_[i].used && pds_[i].refs > 0) --pds_[i].refs;
}

HostServer::QpCtl* HostServer::find_qp_ctl(uint32_t qpn) noexcept {
  uint32_t index = handle_index(qpn) - config_.qp_slot_base;  // below the base: wraps, found in no slot
  if (index >= qps_ctl_.size() || (qpn >> 24) != 0) return nullptr;
  QpCtl& qp = qps_ctl_[index];
  return qp.used && qp.gen == handle_gen(qpn) ? &qp : nullptr;
}

// The QP's state is the lcore's (it moves QPs to ERR on its own): the fast
// half checks and applies the transition, and its answer is the reply.
Status HostServer::on_modify_qp(App& app, const Request& req, Reply* rep) {
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
Status HostServer::on_query_qp(App& app, const Request& req, Reply* rep) {
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
void HostServer::free_qp(uint32_t index, bool) {
  QpCtl& qp = qps_ctl_[index];
  ResourceAmounts* used = usage_of(apps_, qp.app_index, qp.app_id);
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

Status HostServer::on_destroy_qp(App& app, const Request& req) {
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

void HostServer::drop_app(uint32_t app_index, bool died) {
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

void HostServer::retire(ShmRegion&& region, bool device_mapped, uint32_t mr_index) {
  if (!region.valid()) {
    if (mr_index != UINT32_MAX) free_mrs_.push_back(mr_index);
    return;
  }
  mapped_bytes_ -= region.size();
  retired_bytes_ += region.size();
  retired_.push_back(Retired{std::move(region), sent_seq_, device_mapped, mr_index});
}

// ---------------------------------------------------------------- fast half: applying control

void HostServer::apply(const ControlMsg& m, ControlResult* r) noexcept {
  switch (m.kind) {
    case MsgKind::kAttach: {
      if (m.index >= fast_apps_.size()) fast_apps_.resize(m.index + 1);
      FastApp& a = fast_apps_[m.index];
      a.id = m.app_id;
      a.qpn_by_bit.clear();
      a.doorbells = m.doorbells;  // ready_qps reads it from now on
      ++counters_.apps_attached;
      HostEvent ev{};
      ev.kind = HostEventKind::kAppAttached;
      ev.app_id = m.app_id;
      events_.push_back(ev);
      break;
    }
    case MsgKind::kDetach: {
      for (uint32_t i = 0; i < qps_.size(); ++i) {
        if (qps_[i].used && qps_[i].info.app_id == m.app_id) fast_free_qp(i, m.died);
      }
      for (uint32_t i = 0; i < srqs_.size(); ++i) {  // after its QPs (kSrqDestroyed promises that)
        if (srqs_[i].used && srqs_[i].app_id == m.app_id) fast_free_srq(i);
      }
      for (CqSlot& cq : cqs_) {
        if (cq.used && cq.app_id == m.app_id) cq = CqSlot{.gen = cq.gen};
      }
      for (uint32_t i = 0; i < mrs_.size(); ++i) {
        if (mrs_[i].used && mrs_[i].app_id == m.app_id) fast_free_mr(i);
      }
      if (m.index < fast_apps_.size()) {
        if (fast_apps_[m.index].deferred != 0) --deferred_apps_;
        fast_apps_[m.index] = FastApp{};
      }
      ++counters_.apps_detached;
      HostEvent ev{};
      ev.kind = HostEventKind::kAppDetached;
      ev.app_id = m.app_id;
      ev.app_died = m.died;
      events_.push_back(ev);
      break;
    }
    case MsgKind::kCqCreate: {
      if (m.index >= cqs_.size()) cqs_.resize(m.index + 1);
      CqSlot& cq = cqs_[m.index];
      cq.gen = m.gen;
      cq.app_id = m.app_id;
      cq.ring = m.cq_ring;
      cq.notify = m.notify;
      cq.timestamps = m.timestamps;
      cq.event_fd = m.event_fd;
      cq.overrun = false;  // the slot may be an overrun CQ's
      cq.app_index = m.app_index;
      cq.pending_events = 0;
      cq.used = true;
      break;
    }
    case MsgKind::kCqDestroy:
      if (m.index < cqs_.size()) {
        forget_pending(cqs_[m.index].app_index, cqs_[m.index].pending_events);
        cqs_[m.index] = CqSlot{.gen = cqs_[m.index].gen};
      }
      break;
    case MsgKind::kMrRegister: {
      if (m.index >= mrs_.size()) mrs_.resize(m.index + 1);
      MrSlot& mr = mrs_[m.index];
      mr.gen = m.gen;
      mr.app_id = m.app_id;
      mr.pd = m.pd;
      mr.access = m.access;
      mr.addr = m.addr;
      mr.length = m.length;
      mr.base = m.base;
      mr.used = true;
      HostEvent ev{};
      ev.kind = HostEventKind::kMrRegistered;
      ev.app_id = m.app_id;
      ev.lkey = make_key(m.gen, m.index);
      ev.addr = m.base;
      ev.length = m.length;
      ev.va = m.addr;
      ev.access = m.access;
      ev.pd = m.pd;
      ev.map_addr = m.map_addr;
      ev.map_length = m.map_length;
      ev.hugetlb = m.hugetlb;
      events_.push_back(ev);
      break;
    }
    case MsgKind::kMrDeregister:
      if (m.index < mrs_.size() && mrs_[m.index].used) fast_free_mr(m.index);
      break;
    case MsgKind::kQpCreate: {
      if (m.index >= qps_.size()) qps_.resize(m.index + 1);
      QpSlot& qp = qps_[m.index];
      qp.gen = m.gen;
      qp.app_index = m.app_index;
      qp.doorbell_bit = m.doorbell_bit;
      qp.info = m.info;
      qp.sq = m.sq;
      qp.rq = m.rq;
      qp.pending_events = 0;
      qp.used = true;
      if (m.app_index < fast_apps_.size()) {
        std::vector<uint32_t>& by_bit = fast_apps_[m.app_index].qpn_by_bit;
        if (m.doorbell_bit >= by_bit.size()) by_bit.resize(m.doorbell_bit + 1, 0);
        by_bit[m.doorbell_bit] = m.info.qpn;
      }
      HostEvent ev{};
      ev.kind = HostEventKind::kQpCreated;
      ev.app_id = m.app_id;
      ev.qpn = m.info.qpn;
      ev.state = IBV_QPS_RESET;
      events_.push_back(ev);
      break;
    }
    case MsgKind::kQpModify:
      r->status = static_cast<uint32_t>(apply_modify(m, &r->state));
      break;
    case MsgKind::kQpDestroy:
      if (m.index < qps_.size() && qps_[m.index].used) fast_free_qp(m.index, false);
      break;
    case MsgKind::kQpQuery: {
      const QpSlot* qp = find_qp(m.info.qpn);
      r->status = static_cast<uint32_t>(qp != nullptr ? Status::kOk : Status::kNotFound);
      if (qp != nullptr) r->state = qp->info.state;
      break;
    }
    case MsgKind::kSrqCreate:
    case MsgKind::kSrqDestroy:
    case MsgKind::kSrqModify:
      apply_srq(m, r);  // host_server_srq.cc
      break;
    case MsgKind::kEvents:
      if (m.index < fast_apps_.size() && fast_apps_[m.index].id == m.app_id) {
        FastApp& a = fast_apps_[m.index];
        a.events = m.event_ring;
        a.event_stats = m.event_stats;
        a.event_fd = m.event_fd;
      }
      break;
  }
}

Status HostServer::apply_modify(const ControlMsg& msg, ibv_qp_state* state) noexcept {
  const ModifyQpRequest& m = msg.modify;
  QpSlot* qp = find_qp(m.qpn);
  if (qp == nullptr) return Status::kNotFound;
  QpInfo& q = qp->info;
  uint32_t mask = m.attr_mask;
  ibv_qp_state cur = q.state;
  // Checked before the cast: an ibv_qp_state outside its enumerators is undefined behaviour.
  if ((mask & IBV_QP_STATE) != 0 && m.qp_state > IBV_QPS_ERR) return Status::kInvalidArgument;
  ibv_qp_state target = (mask & IBV_QP_STATE) != 0 ? static_cast<ibv_qp_state>(m.qp_state) : cur;
  bool allowed = target == IBV_QPS_RESET || target == IBV_QPS_ERR ||
                 (cur == IBV_QPS_RESET && target == IBV_QPS_INIT) ||
                 (cur == IBV_QPS_INIT && (target == IBV_QPS_INIT || target == IBV_QPS_RTR)) ||
                 (cur == IBV_QPS_RTR && target == IBV_QPS_RTS) ||
                 (cur == IBV_QPS_RTS && target == IBV_QPS_RTS);
  if (!allowed) return Status::kBadState;
  // RC: RTR names the peer. UD: no peer (each WR names one); INIT sets the Q_Key.
  const bool ud = q.qp_type == IBV_QPT_UD;
  constexpr uint32_t kRtrNeeds = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (!ud && cur == IBV_QPS_INIT && target == IBV_QPS_RTR && (mask & kRtrNeeds) != kRtrNeeds) {
    return Status::kInvalidArgument;
  }
  if (ud && cur == IBV_QPS_RESET && target == IBV_QPS_INIT && (mask & IBV_QP_QKEY) == 0) {
    return Status::kInvalidArgument;
  }
  if (cur == IBV_QPS_RTR && target == IBV_QPS_RTS && (mask & IBV_QP_SQ_PSN) == 0) {
    return Status::kInvalidArgument;
  }
  if (((mask & IBV_QP_PATH_MTU) != 0 && (m.path_mtu < IBV_MTU_256 || m.path_mtu > IBV_MTU_4096)) ||
      ((mask & IBV_QP_DEST_QPN) != 0 && m.dest_qp_num > 0xFFFFFF) ||
      ((mask & IBV_QP_RQ_PSN) != 0 && m.rq_psn > 0xFFFFFF) ||
      ((mask & IBV_QP_SQ_PSN) != 0 && m.sq_psn > 0xFFFFFF)) {
    return Status::kInvalidArgument;
  }
  if ((mask & IBV_QP_QKEY) != 0) q.qkey = m.qkey;
  if ((mask & IBV_QP_ACCESS_FLAGS) != 0) q.qp_access_flags = m.qp_access_flags;
  if ((mask & IBV_QP_PORT) != 0) q.port_num = m.port_num;
  if ((mask & IBV_QP_PATH_MTU) != 0) q.path_mtu = static_cast<ibv_mtu>(m.path_mtu);
  if ((mask & IBV_QP_DEST_QPN) != 0) q.dest_qp_num = m.dest_qp_num;
  if ((mask & IBV_QP_RQ_PSN) != 0) q.rq_psn = m.rq_psn;
  if ((mask & IBV_QP_SQ_PSN) != 0) q.sq_psn = m.sq_psn;
  if ((mask & IBV_QP_AV) != 0) std::memcpy(q.dgid, m.dgid, sizeof q.dgid);
  if ((mask & IBV_QP_TIMEOUT) != 0) q.timeout = m.timeout;
  if ((mask & IBV_QP_RETRY_CNT) != 0) q.retry_cnt = m.retry_cnt;
  if ((mask & IBV_QP_RNR_RETRY) != 0) q.rnr_retry = m.rnr_retry;
  if ((mask & IBV_QP_MIN_RNR_TIMER) != 0) q.min_rnr_timer = m.min_rnr_timer;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) != 0) q.max_rd_atomic = m.max_rd_atomic;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) != 0) q.max_dest_rd_atomic = m.max_dest_rd_atomic;
  if (target == IBV_QPS_RESET) {
    qp->sq.discard();
    qp->rq.discard();
  }
  // A QP of an SRQ entering ERR takes no more of its WQEs (verbs' last-WQE-reached).
  if (target == IBV_QPS_ERR && cur != IBV_QPS_ERR && q.srq != 0)
    raise_event(qp->app_index, IBV_EVENT_QP_LAST_WQE_REACHED, q.qpn, qp->pending_events, kPendLastWqe);
  q.state = target;
  *state = target;
  HostEvent ev{};
  ev.kind = HostEventKind::kQpStateChanged;
  ev.app_id = q.app_id;
  ev.qpn = q.qpn;
  ev.state = target;
  events_.push_back(ev);
  return Status::kOk;
}

void HostServer::forget_pending(uint32_t app_index, uint8_t& pending) noexcept {
  if (pending == 0 || app_index >= fast_apps_.size()) return;
  FastApp& a = fast_apps_[app_index];
  const uint32_t n = static_cast<uint32_t>(__builtin_popcount(pending));
  pending = 0;
  if (a.deferred == 0) return;
  a.deferred -= std::min(a.deferred, n);
  if (a.deferred == 0) --deferred_apps_;
}

void HostServer::fast_free_qp(uint32_t index, bool died) noexcept {
  QpSlot& qp = qps_[index];
  forget_pending(qp.app_index, qp.pending_events);  // its events go with it
  HostEvent ev{};
  ev.kind = HostEventKind::kQpDestroyed;
  ev.app_id = qp.info.app_id;
  ev.qpn = qp.info.qpn;
  ev.state = qp.info.state;
  ev.app_died = died;
  events_.push_back(ev);
  if (qp.app_index < fast_apps_.size() && fast_apps_[qp.app_index].id == qp.info.app_id) {
    std::vector<uint32_t>& by_bit = fast_apps_[qp.app_index].qpn_by_bit;
    if (qp.doorbell_bit < by_bit.size()) by_bit[qp.doorbell_bit] = 0;
  }
  qp.sq = RingReader<SendWqe>();
  qp.rq = RingReader<RecvWqe>();
  qp.used = false;
}

void HostServer::fast_bind_doorbell(uint32_t app_index, uint32_t app_id, uint32_t bit, uint32_t value) noexcept {
  if (app_index >= fast_apps_.size() || fast_apps_[app_index].id != app_id) return;
  std::vector<uint32_t>& by_bit = fast_apps_[app_index].qpn_by_bit;
  if (bit >= by_bit.size()) {
    if (value == 0) return;
    by_bit.resize(bit + 1, 0);  // control message, not the data path
  }
  by_bit[bit] = value;
}

void HostServer::fast_free_mr(uint32_t index) noexcept {
  MrSlot& mr = mrs_[index];
  HostEvent ev{};
  ev.kind = HostEventKind::kMrDeregistered;
  ev.app_id = mr.app_id;
  ev.lkey = make_key(mr.gen, index);
  ev.addr = mr.base;
  ev.length = mr.length;
  events_.push_back(ev);
  mr.used = false;
  mr.base = nullptr;
}

const QpInfo* HostServer::qp_info(uint32_t qpn) const noexcept {
  auto* self = const_cast<HostServer*>(this);
  QpSlot* qp = self->find_qp(qpn);
  return qp != nullptr ? &qp->info : nullptr;
}

HostServer::QpSlot* HostServer::find_qp(uint32_t qpn) noexcept {
  uint32_t index = handle_index(qpn) - config_.qp_slot_base;
  if (index >= qps_.size() || (qpn >> 24) != 0) return nullptr;
  QpSlot& qp = qps_[index];
  return qp.used && qp.gen == handle_gen(qpn) ? &qp : nullptr;
}

HostServer::CqSlot* HostServer::find_cq(uint32_t handle) noexcept {
  uint32_t index = handle_index(handle);
  if (index >= cqs_.size()) return nullptr;
  CqSlot& cq = cqs_[index];
  return cq.used && cq.gen == handle_gen(handle) ? &cq : nullptr;
}

HostServer::MrSlot* HostServer::find_mr(uint32_t key) noexcept {
  uint32_t index = key >> 8;
  if (index >= mrs_.size()) return nullptr;
  MrSlot& mr = mrs_[index];
  return mr.used && mr.gen == static_cast<uint8_t>(key) ? &mr : nullptr;
}

// ---------------------------------------------------------------- fast path

bool HostServer::next_event(HostEvent* out) {
  if (events_.empty()) {
    // The port has acted on every event so far (it acts on each before
    // asking for the next): what the messages removed may be unmapped.
    consumed_seq_.store(applied_seq_, std::memory_order_release);
    return false;
  }
  *out = events_.front();
  events_.pop_front();
  return true;
}

std::size_t HostServer::ready_qps(std::span<uint32_t> out, uint32_t first_app) noexcept {
  std::size_t n = 0;
  const std::size_t napps = fast_apps_.size();
  for (std::size_t k = 0; k < napps; ++k) {
    FastApp& app = fast_apps_[(first_app + k) % napps];
    if (app.doorbells == nullptr) continue;
    DoorbellPage* db = app.doorbells;
    for (uint32_t s = 0; s < DoorbellPage::kSummaryWords; ++s) {
      if (db->summary[s].load(std::memory_order_relaxed) == 0) continue;
      uint64_t summary = db->summary[s].exchange(0, std::memory_order_acquire);
      while (summary != 0) {
        uint32_t w = s * 64 + static_cast<uint32_t>(__builtin_ctzll(summary));
        summary &= summary - 1;
        uint64_t bits = db->words[w].exchange(0, std::memory_order_acquire);
        while (bits != 0) {
          if (n == out.size()) {
            // Out of room: give back what we took so nothing is lost.
            db->words[w].fetch_or(bits, std::memory_order_relaxed);
            db->summary[s].fetch_or(summary | (uint64_t{1} << (w % 64)), std::memory_order_release);
            return n;
          }
          uint32_t bit = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
          bits &= bits - 1;
          if (bit < app.qpn_by_bit.size() && app.qpn_by_bit[bit] != 0) {
            out[n++] = app.qpn_by_bit[bit];
          }
        }
      }
    }
  }
  return n;
}

bool HostServer::write_cqe(uint32_t cq_handle, const Cqe& cqe) noexcept {
  CqSlot* cq = find_cq(cq_handle);
  if (cq == nullptr || cq->overrun) return false;
  Cqe* slot = cq->ring.claim();
  if (slot == nullptr) {
    if (cq->ring.corrupt()) ++counters_.ring_corrupt;
    ++counters_.cq_overruns;
    // Verbs: an overrun CQ is in error (the application learns it from
    // poll_cq once it has taken what the ring holds), and every QP that
    // completes into it goes to ERR (complete_send/recv).
    cq->overrun = true;
    cq->notify->overrun.store(1, std::memory_order_release);
    raise_event(cq->app_index, IBV_EVENT_CQ_ERR, cq_handle, cq->pending_events, kPendCqErr);
    return false;
  }
  *slot = cqe;
  if (cq->timestamps != nullptr) cq->timestamps[cq->ring.slot_of(slot)] = fast_now_;
  cq->ring.publish();
  ++counters_.cqes;
  if (cq->event_fd >= 0) {
    // Pairs with the application's fence between arming and its last poll.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (cq->notify->armed.load(std::memory_order_relaxed) != 0 &&
        cq->notify->armed.exchange(0, std::memory_order_acq_rel) != 0) {
      cq->notify->fired.store(1, std::memory_order_release);
      uint64_t one = 1;
      ssize_t w = write(cq->event_fd, &one, sizeof one);
      (void)w;  // EAGAIN: the counter is already non-zero, the app will wake anyway
      ++counters_.cq_events;
    }
  }
  return true;
}

bool HostServer::cq_in_error(uint32_t cq_handle) noexcept {
  const CqSlot* cq = find_cq(cq_handle);
  return cq == nullptr || cq->overrun;
}

uint32_t HostServer::cq_space(uint32_t qpn, bool send) noexcept {
  QpSlot* qp = find_qp(qpn);
  if (qp == nullptr) return 0;
  CqSlot* cq = find_cq(send ? qp->info.send_cq : qp->info.recv_cq);
  return cq != nullptr ? cq->ring.free_entries() : 0;
}

void HostServer::set_error(QpSlot& qp) noexcept {
  if (qp.info.state == IBV_QPS_ERR) return;
  qp.info.state = IBV_QPS_ERR;
  // The worker moved it (not the application): QP fatal; on an SRQ also last-WQE-reached.
  raise_event(qp.app_index, IBV_EVENT_QP_FATAL, qp.info.qpn, qp.pending_events, kPendQpFatal);
  if (qp.info.srq != 0)
    raise_event(qp.app_index, IBV_EVENT_QP_LAST_WQE_REACHED, qp.info.qpn, qp.pending_events, kPendLastWqe);
  HostEvent ev{};
  ev.kind = HostEventKind::kQpStateChanged;
  ev.app_id = qp.info.app_id;
  ev.qpn = qp.info.qpn;
  ev.state = IBV_QPS_ERR;
  events_.push_back(ev);  // control-path allocation only: once per QP error
}

void HostServer::qp_error(uint32_t qpn) noexcept {
  if (QpSlot* qp = find_qp(qpn)) set_error(*qp);
}

// ---------------------------------------------------------------- asynchronous events (fast half)

bool HostServer::push_event(uint32_t app_index, ibv_event_type type, uint32_t element) noexcept {
  if (app_index >= fast_apps_.size()) return true;
  FastApp& a = fast_apps_[app_index];
  if (a.events.depth() == 0) return true;  // protocol v1: no ring, no events
  AsyncEvent* e = a.events.claim();
  if (e == nullptr) return false;
  e->type = static_cast<uint32_t>(type);
  e->element = element;
  a.events.publish();
  a.event_stats->written.fetch_add(1, std::memory_order_relaxed);
  ++counters_.async_events;
  uint64_t one = 1;
  const ssize_t w = write(a.event_fd, &one, sizeof one);  // non-blocking: EAGAIN means already readable
  (void)w;
  return true;
}

void HostServer::raise_event(uint32_t app_index, ibv_event_type type, uint32_t element, uint8_t& pending,
                             uint8_t bit) noexcept {
  if (pending & bit) return;  // already waiting for room: one of a kind per object
  if (push_event(app_index, type, element)) return;
  pending |= bit;
  FastApp& a = fast_apps_[app_index];
  if (a.deferred++ == 0) ++deferred_apps_;
  a.event_stats->deferred.fetch_add(1, std::memory_order_relaxed);
  ++counters_.async_events_deferred;
}

void HostServer::publish_clock(uint64_t tsc_base, uint64_t tsc_mult) noexcept {
  page_->clock_tsc_base.store(tsc_base, std::memory_order_relaxed);
  page_->clock_tsc_mult.store(tsc_mult, std::memory_order_release);
}

void HostServer::set_port_active(bool active) noexcept {
  if (active == port_active_) return;
  port_active_ = active;
  page_->port_active.store(active ? 1 : 0, std::memory_order_release);
  const ibv_event_type type = active ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
  for (uint32_t i = 0; i < fast_apps_.size(); ++i) {
    FastApp& a = fast_apps_[i];
    if (a.id == 0 || a.events.depth() == 0) continue;
    if (a.pending_port) continue;  // the pending one reports the state when written
    if (push_event(i, type, 1)) continue;
    a.pending_port = kPendPort;
    if (a.deferred++ == 0) ++deferred_apps_;
    a.event_stats->deferred.fetch_add(1, std::memory_order_relaxed);
    ++counters_.async_events_deferred;
  }
}

// The events kept on objects while their applications' rings were full,
// written now that there is room (oldest kind first is not promised: they
// are state, not a history). Runs only while some are pending.
void HostServer::flush_deferred() noexcept {
  for (uint32_t i = 0; i < fast_apps_.size(); ++i) {
    FastApp& a = fast_apps_[i];
    if (a.deferred == 0 || a.events.free_entries() == 0) continue;
    auto take = [&](uint8_t& pending, uint8_t bit, ibv_event_type type, uint32_t element) {
      if (!(pending & bit) || !push_event(i, type, element)) return;
      pending &= static_cast<uint8_t>(~bit);
      --a.deferred;
    };
    if (a.pending_port) take(a.pending_port, kPendPort, port_active_ ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR, 1);
    for (QpSlot& qp : qps_) {
      if (a.deferred == 0) break;
      if (!qp.used || qp.app_index != i || qp.pending_events == 0) continue;
      take(qp.pending_events, kPendQpFatal, IBV_EVENT_QP_FATAL, qp.info.qpn);
      take(qp.pending_events, kPendLastWqe, IBV_EVENT_QP_LAST_WQE_REACHED, qp.info.qpn);
    }
    for (uint32_t c = 0; c < cqs_.size() && a.deferred != 0; ++c) {
      CqSlot& cq = cqs_[c];
      if (cq.used && cq.app_index == i && cq.pending_events != 0)
        take(cq.pending_events, kPendCqErr, IBV_EVENT_CQ_ERR, make_handle(cq.gen, c));
    }
    for (uint32_t k = 0; k < srqs_.size() && a.deferred != 0; ++k) {
      SrqSlot& sq = srqs_[k];
      if (sq.used && sq.app_index == i && sq.pending_events != 0)
        take(sq.pending_events, kPendSrqLimit, IBV_EVENT_SRQ_LIMIT_REACHED, make_handle(sq.gen, k));
    }
    if (a.deferred == 0) --deferred_apps_;
  }
}

bool HostServer::translate(const QpSlot& qp, const WqeSge& s, bool local_write, Segment* out,
                           uint32_t* vendor_err) noexcept {
  return translate_for(qp.info.app_id, qp.info.pd, s, local_write, out, vendor_err);
}

bool HostServer::translate_for(uint32_t app_id, uint32_t pd, const WqeSge& s, bool local_write, Segment* out,
                               uint32_t* vendor_err) noexcept {
  MrSlot* mr = find_mr(s.lkey);
  if (mr == nullptr || mr->app_id != app_id || mr->pd != pd ||
      (local_write && (mr->access & IBV_ACCESS_LOCAL_WRITE) == 0)) {
    ++counters_.bad_lkey;
    *vendor_err = kVendorBadLkey;
    return false;
  }
  if (s.offset > mr->length || s.length > mr->length - s.offset) {
    ++counters_.sge_out_of_bounds;
    *vendor_err = kVendorOutOfBounds;
    return false;
  }
  out->addr = mr->base + s.offset;
  out->length = s.length;
  out->lkey = s.lkey;
  out->va = mr->addr + s.offset;
  return true;
}

std::size_t HostServer::fetch_send(uint32_t qpn, std::span<SendWork> out) noexcept {
  return fetch_send_to(qpn, out.size(), [&](std::size_t i) -> SendWork& { return out[i]; });
}

std::size_t HostServer::fetch_send(uint32_t qpn, SendWork* const* out, std::size_t max) noexcept {
  return fetch_send_to(qpn, max, [&](std::size_t i) -> SendWork& { return *out[i]; });
}


template <class Out>
std::size_t HostServer::fetch_send_to(uint32_t qpn, std::size_t max, Out&& out) noexcept {
  SendWorkSink<Out&> sink{out};
  return fetch_send_into(qpn, max, sink);
}

std::size_t HostServer::fetch_recv(uint32_t qpn, std::span<RecvWork> out) noexcept {
  return fetch_recv_to(qpn, out.size(), [&](std::size_t i) -> RecvWork& { return out[i]; });
}

std::size_t HostServer::fetch_recv(uint32_t qpn, RecvWork* const* out, std::size_t max) noexcept {
  return fetch_recv_to(qpn, max, [&](std::size_t i) -> RecvWork& { return *out[i]; });
}

template <class Out>
std::size_t HostServer::fetch_recv_to(uint32_t qpn, std::size_t max, Out&& out) noexcept {
  RecvWorkSink<Out&> sink{out};
  return fetch_recv_into(qpn, max, sink);
}

uint32_t HostServer::send_queued(uint32_t qpn) noexcept {
  QpSlot* qp = find_qp(qpn);
  return qp != nullptr ? qp->sq.available() : 0;
}

uint32_t HostServer::recv_queued(uint32_t qpn) noexcept {
  QpSlot* qp = find_qp(qpn);
  return qp != nullptr ? qp->rq.available() : 0;
}

void HostServer::flush_send(QpSlot& qp) noexcept {
  uint32_t avail = qp.sq.available();
  uint32_t done = 0;
  for (; done < avail; ++done) {
    SendWqe w;
    copy_from_shared(&w, qp.sq.peek(done));
    Cqe c{};
    c.wr_id = w.wr_id;
    c.qp_num = qp.info.qpn;
    c.status = IBV_WC_WR_FLUSH_ERR;
    c.opcode = static_cast<uint8_t>(wc_opcode_of(w.opcode));
    if (!write_cqe(qp.info.send_cq, c) && !cq_in_error(qp.info.send_cq)) break;  // room later
  }
  if (done > 0) {
    qp.sq.release(done);
    qp.sq.completed(done);
    counters_.flushed_wqes += done;
  }
}

void HostServer::flush_recv(QpSlot& qp) noexcept {
  uint32_t avail = qp.rq.available();
  uint32_t done = 0;
  for (; done < avail; ++done) {
    Cqe c{};
    c.wr_id = qp.rq.peek(done)->wr_id;
    c.qp_num = qp.info.qpn;
    c.status = IBV_WC_WR_FLUSH_ERR;
    c.opcode = IBV_WC_RECV;
    if (!write_cqe(qp.info.recv_cq, c) && !cq_in_error(qp.info.recv_cq)) break;  // room later
  }
  if (done > 0) {
    qp.rq.release(done);
    qp.rq.completed(done);
    counters_.flushed_wqes += done;
  }
}

bool HostServer::complete_send(uint32_t qpn, const SendWork& work, ibv_wc_status status) noexcept {
  return complete_send(qpn, work.wr_id, wc_opcode_of(static_cast<uint8_t>(work.opcode)),
                       work.opcode == IBV_WR_RDMA_READ ? work.length : 0, (work.send_flags & IBV_SEND_SIGNALED) != 0,
                       status);
}

bool HostServer::complete_send(uint32_t qpn, uint64_t wr_id, ibv_wc_opcode opcode, uint32_t byte_len, bool signaled,
                               ibv_wc_status status) noexcept {
  QpSlot* qp = find_qp(qpn);
  if (qp == nullptr) return false;
  qp->sq.completed(1);  // finished, whether or not a CQE says so
  signaled = signaled || qp->info.sq_sig_all;
  if (status != IBV_WC_SUCCESS) set_error(*qp);
  if (status == IBV_WC_SUCCESS && !signaled) return true;
  Cqe c{};
  c.wr_id = wr_id;
  c.qp_num = qpn;
  c.status = static_cast<uint8_t>(status);
  c.opcode = static_cast<uint8_t>(opcode);
  c.byte_len = byte_len;
  if (!write_cqe(qp->info.send_cq, c)) {
    set_error(*qp);
    return false;
  }
  return true;
}

bool HostServer::complete_recv(uint32_t qpn, const RecvWork& work, ibv_wc_status status,
                               uint32_t byte_len, ibv_wc_opcode opcode, bool with_imm,
                               uint32_t imm_data, uint32_t src_qp, bool grh) noexcept {
  return complete_recv(qpn, work.wr_id, status, byte_len, opcode, with_imm, imm_data, src_qp, grh);
}

bool HostServer::complete_recv(uint32_t qpn, uint64_t wr_id, ibv_wc_status status, uint32_t byte_len,
                               ibv_wc_opcode opcode, bool with_imm, uint32_t imm_data, uint32_t src_qp,
                               bool grh) noexcept {
  QpSlot* qp = find_qp(qpn);
  if (qp == nullptr) return false;
  if (qp->info.srq == 0) qp->rq.completed(1);  // an SRQ's WQEs are in no QP's ring
  // A UD receive too short for its datagram fails alone; the QP goes on.
  if (status != IBV_WC_SUCCESS && qp->info.qp_type != IBV_QPT_UD) set_error(*qp);
  Cqe c{};
  c.wr_id = wr_id;
  c.qp_num = qpn;
  c.status = static_cast<uint8_t>(status);
  c.opcode = static_cast<uint8_t>(opcode);
  c.byte_len = byte_len;
  c.imm_data = imm_data;
  c.wc_flags = static_cast<uint16_t>((with_imm ? IBV_WC_WITH_IMM : 0) | (grh ? IBV_WC_GRH : 0));
  c.src_qp = src_qp;
  if (!write_cqe(qp->info.recv_cq, c)) {
    set_error(*qp);
    return false;
  }
  return true;
}

uint8_t* HostServer::translate_remote(uint32_t qpn, uint32_t rkey, uint64_t remote_addr,
                                      uint32_t length, int access) noexcept {
  QpSlot* qp = find_qp(qpn);
  MrSlot* mr = find_mr(rkey);
  auto need = static_cast<uint32_t>(access);
  if (qp == nullptr || mr == nullptr || mr->app_id != qp->info.app_id || mr->pd != qp->info.pd ||
      (mr->access & need) != need || (qp->info.qp_access_flags & need) != need ||
      remote_addr < mr->addr || length > mr->length || remote_addr - mr->addr > mr->length - length) {
    ++counters_.bad_rkey;
    return nullptr;
  }
  return mr->base + (remote_addr - mr->addr);
}

// ---------------------------------------------------------------- idle mode

bool HostServer::begin_idle() noexcept {
  page_->sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (FastApp& app : fast_apps_) {
    if (app.doorbells == nullptr) continue;
    for (auto& s : app.doorbells->summary) {
      if (s.load(std::memory_order_relaxed) != 0) {
        page_->sleeping.store(0, std::memory_order_relaxed);
        return false;
      }
    }
  }
  return true;
}

void HostServer::end_idle() noexcept {
  page_->sleeping.store(0, std::memory_order_relaxed);
  uint64_t v;
  while (read(wake_fd_, &v, sizeof v) == sizeof v) {
  }
}

// ---------------------------------------------------------------- accounting

std::size_t HostServer::app_count() const noexcept {
  std::size_t n = 0;
  for (auto& a : apps_) n += a ? 1 : 0;
  return n;
}
std::size_t HostServer::list_apps(std::span<AppInfo> out) const noexcept {
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

std::size_t HostServer::qp_count() const noexcept { return qp_count_; }
std::size_t HostServer::cq_count() const noexcept { return cq_count_; }
std::size_t HostServer::mr_count() const noexcept { return mr_count_; }
std::size_t HostServer::srq_count() const noexcept { return srq_count_; }

HostMemory HostServer::memory() const noexcept {
  HostMemory m{};
  m.qps = qp_count_;
  m.table_bytes = qps_.capacity() * sizeof(QpSlot) + qps_ctl_.capacity() * sizeof(QpCtl) +
                  free_qps_.capacity() * sizeof(uint32_t) + cqs_.capacity() * sizeof(CqSlot) +
                  cqs_ctl_.capacity() * sizeof(CqCtl) + free_cqs_.capacity() * sizeof(uint32_t) +
                  mrs_.capacity() * sizeof(MrSlot) + mrs_ctl_.capacity() * sizeof(MrCtl) +
                  free_mrs_.capacity() * sizeof(uint32_t) + pds_.capacity() * sizeof(PdSlot) +
                  free_pds_.capacity() * sizeof(uint32_t) + apps_.capacity() * sizeof(void*) +
                  fast_apps_.capacity() * sizeof(FastApp) + srqs_.capacity() * sizeof(SrqSlot) +
                  srqs_ctl_.capacity() * sizeof(SrqCtl) + free_srqs_.capacity() * sizeof(uint32_t);
  for (auto& a : apps_) {
    if (a) m.table_bytes += sizeof(App) + a->free_bits.capacity() * sizeof(uint32_t);
  }
  for (auto& a : fast_apps_) m.table_bytes += a.qpn_by_bit.capacity() * sizeof(uint32_t);
  m.mapped_bytes = mapped_bytes_.load(std::memory_order_relaxed);
  m.retired_bytes = retired_bytes_.load(std::memory_order_relaxed);
  m.bytes_per_qp_slot = sizeof(QpSlot) + sizeof(QpCtl);
  return m;
}

HostCounters HostServer::counters() const noexcept {
  HostCounters c = counters_;
  c.protocol_errors = ctl_protocol_errors_.load(std::memory_order_relaxed);
  c.requests_refused = ctl_requests_refused_.load(std::memory_order_relaxed);
  c.attach_denied = ctl_attach_denied_.load(std::memory_order_relaxed);
  c.silent_timeouts = ctl_silent_timeouts_.load(std::memory_order_relaxed);
  c.silent_evicted = ctl_silent_evicted_.load(std::memory_order_relaxed);
  const ResourceAmounts refused = quotas_->refused_total();
  c.refused_qps = refused[resource_index(Resource::kQps)];
  c.refused_cqs = refused[resource_index(Resource::kCqs)];
  c.refused_mrs = refused[resource_index(Resource::kMrs)];
  c.refused_pds = refused[resource_index(Resource::kPds)];
  c.refused_bytes = refused[resource_index(Resource::kBytes)];
  c.refused_srqs = refused[resource_index(Resource::kSrqs)];
  c.refused_queue_bytes = refused[resource_index(Resource::kQueueBytes)];
  return c;
}

}  // namespace tandem::rnic::host
