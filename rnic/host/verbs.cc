#include "rnic/host/verbs.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rnic/host/host_protocol.h"
#include "rnic/host/unix_channel.h"

namespace tandem::rnic::host {

struct CompChannel {
  Context* context = nullptr;
  int fd = -1;
  std::mutex mu;  // guards cqs
  std::vector<Cq*> cqs;
};

struct Context {
  int sock = -1;
  DeviceAttr attr;
  uint32_t app_id = 0;
  uint16_t version = 0;
  uint32_t max_qps = 0;
  uint32_t max_sge = 0;
  uint32_t max_inline = 0;
  uint32_t max_depth = 0;
  ShmRegion doorbell_memory;
  ShmRegion worker_memory;
  DoorbellPage* doorbells = nullptr;
  const WorkerPage* worker = nullptr;
  int wake_fd = -1;
  std::atomic<bool> dead{false};

  std::mutex call_mu;  // one request in flight on the socket
  uint32_t seq = 0;

  std::mutex buf_mu;  // guards buffers
  std::map<uintptr_t, std::unique_ptr<ShmRegion>> buffers;  // alloc_buf() regions by base

  // MRs by key index, read lock-free by post_send/post_recv.
  std::unique_ptr<std::atomic<Mr*>[]> mrs{new std::atomic<Mr*>[kMaxMrs]()};

  // v2: the asynchronous event ring the worker writes, its eventfd, and
  // whether the worker's death was reported (IBV_EVENT_DEVICE_FATAL, once).
  std::mutex event_mu;
  ShmRegion event_memory;
  RingReader<AsyncEvent> events;
  int event_fd = -1;
  bool fatal_reported = false;
};

namespace {

thread_local Status t_status = Status::kOk;
thread_local char t_message[256] = "ok";

Status fail(Status st, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
Status fail(Status st, const char* fmt, ...) {
  t_status = st;
  int n = std::snprintf(t_message, sizeof t_message, "%.*s: ",
                        static_cast<int>(status_name(st).size()), status_name(st).data());
  if (n < 0 || static_cast<std::size_t>(n) >= sizeof t_message) return st;
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(t_message + n, sizeof t_message - n, fmt, ap);
  va_end(ap);
  return st;
}

Status ok() {
  t_status = Status::kOk;
  std::strcpy(t_message, "ok");
  return Status::kOk;
}

int rc(Status st) { return static_cast<int>(st); }

void close_fds(int* fds, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) close(fds[i]);
}

// One request/reply exchange. Received descriptors are stored in rfds.
Status call(Context* ctx, Request& req, MsgType type, const int* fds, std::size_t nfds,
            Reply* rep, int* rfds = nullptr, std::size_t max_rfds = 0,
            std::size_t* nrfds = nullptr) {
  if (ctx->dead.load(std::memory_order_relaxed)) return fail(Status::kWorkerGone, "worker gone");
  std::lock_guard lock(ctx->call_mu);
  req.hdr.magic = kProtocolMagic;
  req.hdr.type = static_cast<uint16_t>(type);
  req.hdr.reserved = 0;
  req.hdr.seq = ++ctx->seq;
  req.hdr.status = 0;
  ssize_t n = send_message(ctx->sock, &req, sizeof req, fds, nfds);
  if (n != static_cast<ssize_t>(sizeof req)) {
    ctx->dead = true;
    return fail(Status::kWorkerGone, "send to worker failed (%s)", std::strerror(n < 0 ? -n : EIO));
  }
  int got[kMaxFdsPerMessage];
  std::size_t ngot = 0;
  for (;;) {
    pollfd p{ctx->sock, POLLIN, 0};
    int r;
    do {
      r = ::poll(&p, 1, ctx->attr.timeout_ms);
    } while (r < 0 && errno == EINTR);
    if (r == 0) return fail(Status::kTimeout, "no reply within %d ms", ctx->attr.timeout_ms);
    n = recv_message(ctx->sock, rep, sizeof *rep, got, kMaxFdsPerMessage, &ngot, false);
    if (n == 0 || n == -ECONNRESET) {
      ctx->dead = true;
      return fail(Status::kWorkerGone, "worker closed the connection");
    }
    // A late answer to a request that already timed out: drop it and keep waiting.
    if (n == static_cast<ssize_t>(sizeof *rep) && rep->hdr.magic == kProtocolMagic &&
        static_cast<int32_t>(rep->hdr.seq - req.hdr.seq) < 0) {
      close_fds(got, ngot);
      continue;
    }
    break;
  }
  if (n != static_cast<ssize_t>(sizeof *rep) || rep->hdr.magic != kProtocolMagic ||
      rep->hdr.seq != req.hdr.seq || rep->hdr.type != req.hdr.type || ngot > max_rfds) {
    close_fds(got, ngot);
    ctx->dead = true;  // the stream is out of step: nothing after this can be trusted
    return fail(Status::kProtocolError, "bad reply from worker");
  }
  auto st = static_cast<Status>(rep->hdr.status);
  if (st != Status::kOk) {
    close_fds(got, ngot);
    if (st >= Status::kCount) return fail(Status::kProtocolError, "bad status in reply");
    return fail(st, "refused by worker");
  }
  if (nrfds != nullptr) {
    for (std::size_t i = 0; i < ngot; ++i) rfds[i] = got[i];
    *nrfds = ngot;
  } else {
    close_fds(got, ngot);
  }
  return ok();
}

void ring_doorbell(Context* ctx, uint32_t bit) {
  DoorbellPage* db = ctx->doorbells;
  uint64_t mask = uint64_t{1} << (bit % 64);
  // Always the atomic OR, never "skip if the bit looks set": that plain load
  // may be satisfied before this thread's ring-producer store is visible
  // (store-load reordering), see a bit the worker has just taken while its
  // drain still saw the old producer, and the WQE would wait for a doorbell
  // that never comes (seen as send_lat hanging through the loopback worker).
  db->words[bit / 64].fetch_or(mask, std::memory_order_release);
  // Always set the summary after the word, even if the word was already set:
  // the worker may have just taken the summary but not yet the word.
  db->summary[bit / 4096].fetch_or(uint64_t{1} << ((bit / 64) % 64), std::memory_order_release);
  // Pairs with the worker's fence between "sleeping = 1" and its last look at
  // the doorbells: either it sees our bit or we see its flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (ctx->worker->sleeping.load(std::memory_order_relaxed) != 0) {
    uint64_t one = 1;
    ssize_t w = write(ctx->wake_fd, &one, sizeof one);
    (void)w;  // EAGAIN means the counter is already non-zero: the worker will wake anyway
  }
}

Mr* find_mr(Context* ctx, uint32_t lkey) {
  uint32_t idx = mr_key_index(lkey);
  if (idx >= kMaxMrs) return nullptr;
  Mr* mr = ctx->mrs[idx].load(std::memory_order_acquire);
  return mr != nullptr && mr->lkey == lkey ? mr : nullptr;
}

// SGE as an offset into its MR. An unknown lkey passes through unchanged: the
// worker rejects it with an error completion, as hardware would.
WqeSge to_wqe_sge(Context* ctx, const ibv_sge& s) {
  Mr* mr = find_mr(ctx, s.lkey);
  uint64_t base = mr != nullptr ? reinterpret_cast<uintptr_t>(mr->addr) : 0;
  return WqeSge{s.addr - base, s.length, s.lkey};
}

bool is_atomic(ibv_wr_opcode op) { return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD; }

bool supported_send_opcode(ibv_wr_opcode op) {
  return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND ||
         op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_READ || is_atomic(op);
}

}  // namespace

Status last_status() { return t_status; }
const char* last_error() { return t_message; }

namespace {

// v2: the ring the worker writes asynchronous events into and the eventfd it
// kicks. Without them (no memory, an eventfd refused) the context has no
// events, as on a v1 worker, and still works.
void open_events(Context* ctx) {
  const AsyncEventLayout layout = async_event_layout();
  ShmRegion region;
  if (ShmRegion::create("tandem-events", layout.bytes, false, &region) != Status::kOk) return;
  const int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd < 0) return;
  Request req{};
  Reply rep{};
  const int fds[2] = {region.fd(), efd};
  if (call(ctx, req, MsgType::kAsyncEvents, fds, 2, &rep) != Status::kOk) {
    close(efd);
    return;
  }
  region.close_fd();
  uint8_t* base = region.data();
  ctx->events = RingReader<AsyncEvent>(reinterpret_cast<RingControl*>(base + layout.control),
                                       reinterpret_cast<AsyncEvent*>(base + layout.entries), kAsyncEventDepth);
  ctx->event_memory = std::move(region);
  ctx->event_fd = efd;
}

}  // namespace

Context* open_device(const char* socket_path, const DeviceAttr& attr) {
  auto ctx = std::make_unique<Context>();
  ctx->attr = attr;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (socket_path == nullptr || std::strlen(socket_path) >= sizeof sa.sun_path) {
    fail(Status::kInvalidArgument, "socket path missing or too long");
    return nullptr;
  }
  std::strcpy(sa.sun_path, socket_path);
  ctx->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (ctx->sock < 0 || connect(ctx->sock, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    fail(Status::kWorkerGone, "cannot connect to %s: %s", socket_path, std::strerror(errno));
    if (ctx->sock >= 0) close(ctx->sock);
    return nullptr;
  }
  if (attr.worker_uid >= 0) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(ctx->sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        (cred.uid != 0 && static_cast<int64_t>(cred.uid) != attr.worker_uid)) {
      fail(Status::kAccessDenied, "%s belongs to uid %u, not the worker's (uid %lld)", socket_path,
           static_cast<unsigned>(cred.uid), static_cast<long long>(attr.worker_uid));
      close(ctx->sock);
      return nullptr;
    }
  }
  if (ShmRegion::create("tandem-doorbells", sizeof(DoorbellPage), false, &ctx->doorbell_memory) !=
      Status::kOk) {
    close(ctx->sock);
    fail(Status::kNoMemory, "doorbell page: %s", std::strerror(errno));
    return nullptr;
  }
  ctx->doorbells = reinterpret_cast<DoorbellPage*>(ctx->doorbell_memory.data());

  Request req{};
  req.body.hello.version_min = kProtocolVersionMin;
  req.body.hello.version_max = kProtocolVersionMax;
  req.body.hello.pid = static_cast<uint32_t>(getpid());
  std::snprintf(req.body.hello.name, sizeof req.body.hello.name, "%s",
                attr.name != nullptr ? attr.name : "app");
  if (attr.vnic != nullptr) {
    in_addr a{};
    if (inet_pton(AF_INET, attr.vnic, &a) != 1 || a.s_addr == 0) {
      close(ctx->sock);
      fail(Status::kInvalidArgument, "vnic: not an IPv4 address: %s", attr.vnic);
      return nullptr;
    }
    req.body.hello.vnic_ip = ntohl(a.s_addr);
  }
  Reply rep{};
  int db_fd = ctx->doorbell_memory.fd();
  int fds[kMaxFdsPerMessage];
  std::size_t nfds = 0;
  Status st = call(ctx.get(), req, MsgType::kHello, &db_fd, 1, &rep, fds, 2, &nfds);
  ctx->doorbell_memory.close_fd();
  if (st != Status::kOk) {
    close(ctx->sock);
    return nullptr;
  }
  if (nfds != 2) {
    close_fds(fds, nfds);
    close(ctx->sock);
    fail(Status::kProtocolError, "hello reply carried %zu descriptors, want 2", nfds);
    return nullptr;
  }
  ctx->wake_fd = fds[1];
  if (ShmRegion::map_fd(fds[0], sizeof(WorkerPage), 1u << 20, false, &ctx->worker_memory) !=
      Status::kOk) {
    close(ctx->wake_fd);
    close(ctx->sock);
    fail(Status::kProtocolError, "worker page cannot be mapped");
    return nullptr;
  }
  ctx->worker = reinterpret_cast<const WorkerPage*>(ctx->worker_memory.data());
  if (ctx->worker->magic != WorkerPage::kMagic) {
    close(ctx->wake_fd);
    close(ctx->sock);
    fail(Status::kProtocolError, "worker page has a bad magic");
    return nullptr;
  }
  const HelloReply& h = rep.body.hello;
  ctx->version = h.version;
  ctx->app_id = h.app_id;
  ctx->max_qps = h.max_qps;
  ctx->max_sge = h.max_sge < kMaxSge ? h.max_sge : kMaxSge;
  ctx->max_inline = h.max_inline < kMaxInline ? h.max_inline : kMaxInline;
  ctx->max_depth = h.max_queue_depth < kMaxQueueDepth ? h.max_queue_depth : kMaxQueueDepth;
  if (ctx->version >= 2) open_events(ctx.get());
  ok();
  return ctx.release();
}

int close_device(Context* ctx) {
  if (ctx == nullptr) return rc(fail(Status::kInvalidArgument, "null context"));
  close(ctx->sock);
  if (ctx->wake_fd >= 0) close(ctx->wake_fd);
  if (ctx->event_fd >= 0) close(ctx->event_fd);
  delete ctx;
  return rc(ok());
}

int async_event_fd(const Context* ctx) { return ctx->event_fd; }
int control_fd(const Context* ctx) { return ctx->sock; }

bool next_async_event(Context* ctx, AsyncEvent* out) {
  std::lock_guard lock(ctx->event_mu);
  if (ctx->event_fd >= 0) {
    uint64_t n;
    const ssize_t r = read(ctx->event_fd, &n, sizeof n);  // taken before the ring is read: no kick is missed
    (void)r;
    if (ctx->events.available() > 0) {
      const AsyncEvent* e = ctx->events.peek(0);
      out->type = e->type;
      out->element = e->element;
      ctx->events.release(1);
      return true;
    }
  }
  if (!ctx->fatal_reported && !worker_alive(ctx)) {
    ctx->fatal_reported = true;
    out->type = IBV_EVENT_DEVICE_FATAL;
    out->element = 0;
    return true;
  }
  return false;
}

bool device_clock_ns(Context* ctx, uint64_t* ns) {
#if defined(__x86_64__)
  if (ctx->worker->version < 2) return false;
  const uint64_t mult = ctx->worker->clock_tsc_mult.load(std::memory_order_acquire);
  const uint64_t base = ctx->worker->clock_tsc_base.load(std::memory_order_relaxed);
  if (mult == 0) return false;
  const uint64_t tsc = __builtin_ia32_rdtsc();
  *ns = static_cast<uint64_t>((static_cast<unsigned __int128>(tsc - base) * mult) >> 32);
  return true;
#else
  (void)ctx;
  (void)ns;
  return false;
#endif
}

bool port_active(Context* ctx) {
  if (!worker_alive(ctx)) return false;
  return ctx->worker->version < 2 || ctx->worker->port_active.load(std::memory_order_acquire) != 0;
}

uint32_t app_id(const Context* ctx) { return ctx->app_id; }
uint16_t protocol_version(const Context* ctx) { return ctx->version; }

void* alloc_buf(Context* ctx, std::size_t length) {
  if (length == 0) {
    fail(Status::kInvalidArgument, "zero-length buffer");
    return nullptr;
  }
  auto region = std::make_unique<ShmRegion>();
  if (ShmRegion::create("tandem-buf", length, ctx->attr.huge_buffers, region.get()) !=
      Status::kOk) {
    fail(Status::kNoMemory, "memfd of %zu bytes: %s", length, std::strerror(errno));
    return nullptr;
  }
  void* p = region->data();
  std::lock_guard lock(ctx->buf_mu);
  ctx->buffers.emplace(reinterpret_cast<uintptr_t>(p), std::move(region));
  ok();
  return p;
}

int free_buf(Context* ctx, void* addr) {
  std::lock_guard lock(ctx->buf_mu);
  auto it = ctx->buffers.find(reinterpret_cast<uintptr_t>(addr));
  if (it == ctx->buffers.end()) return rc(fail(Status::kNotFound, "not an alloc_buf() buffer"));
  ctx->buffers.erase(it);
  return rc(ok());
}

// An adopted buffer with no MR left is forgotten (its pages stay mapped, they
// are the application's): the allocator may reuse or unmap them, and a later
// registration must move them again rather than trust the old memfd.
static void forget_adopted(Context* ctx, uintptr_t a) {
  std::lock_guard lock(ctx->buf_mu);
  auto it = ctx->buffers.upper_bound(a);
  if (it == ctx->buffers.begin()) return;
  --it;
  const uintptr_t lo = it->first, hi = lo + it->second->size();
  if (a >= hi || !it->second->borrowed()) return;
  for (uint32_t i = 0; i < kMaxMrs; ++i)
    if (const Mr* m = ctx->mrs[i].load(std::memory_order_acquire)) {
      const auto ma = reinterpret_cast<uintptr_t>(m->addr);
      if (ma >= lo && ma < hi) return;
    }
  if (ShmRegion::fork_protected()) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DOFORK);  // the application's again
  ctx->buffers.erase(it);
}

int adopt_buf(Context* ctx, void* addr, std::size_t length) {
  // Whole pages of the mapping: huge ones for a hugetlb buffer, which stays on huge pages.
  const auto page = static_cast<uintptr_t>(ShmRegion::page_size_at(addr));
  const auto a = reinterpret_cast<uintptr_t>(addr);
  if (length == 0 || a + length < a) return rc(fail(Status::kInvalidArgument, "empty or wrapping range"));
  const uintptr_t lo = a & ~(page - 1), hi = (a + length + page - 1) & ~(page - 1);
  std::lock_guard lock(ctx->buf_mu);
  auto it = ctx->buffers.upper_bound(a);
  if (it != ctx->buffers.begin()) {
    auto prev = std::prev(it);
    if (a + length <= prev->first + prev->second->size()) return rc(ok());  // already shared
    if (lo < prev->first + prev->second->size())
      return rc(fail(Status::kInvalidArgument, "%p+%zu partly overlaps a registered range", addr, length));
  }
  if (it != ctx->buffers.end() && it->first < hi)
    return rc(fail(Status::kInvalidArgument, "%p+%zu partly overlaps a registered range", addr, length));
  auto region = std::make_unique<ShmRegion>();
  const Status st = ShmRegion::adopt(reinterpret_cast<void*>(lo), hi - lo, region.get());
  if (st != Status::kOk) return rc(fail(st, "cannot share %p+%zu: %s", addr, length, std::strerror(errno)));
  ctx->buffers.emplace(lo, std::move(region));
  return rc(ok());
}

bool buf_is_hugetlb(Context* ctx, const void* addr) {
  std::lock_guard lock(ctx->buf_mu);
  auto a = reinterpret_cast<uintptr_t>(addr);
  auto it = ctx->buffers.upper_bound(a);
  if (it == ctx->buffers.begin()) return false;
  --it;
  return a < it->first + it->second->size() && it->second->hugetlb();
}

Ah* create_ah(Pd* pd, const ibv_ah_attr* attr) {
  if (pd == nullptr || attr == nullptr) {
    fail(Status::kInvalidArgument, "null PD or attr");
    return nullptr;
  }
  // RoCEv2: the destination is a GID, and Tandem's GIDs are IPv4-mapped.
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  const uint8_t* g = attr->grh.dgid.raw;
  if (!attr->is_global || std::memcmp(g, kMapped, sizeof kMapped) != 0) {
    fail(Status::kInvalidArgument, "AH needs is_global and an IPv4-mapped dgid (RoCEv2)");
    return nullptr;
  }
  auto* ah = new Ah{};
  ah->owner = pd->context;
  ah->ipv4 = uint32_t{g[12]} << 24 | uint32_t{g[13]} << 16 | uint32_t{g[14]} << 8 | g[15];
  return ah;
}

int destroy_ah(Ah* ah) {
  delete ah;
  return 0;
}

Pd* alloc_pd(Context* ctx) {
  Request req{};
  Reply rep{};
  if (call(ctx, req, MsgType::kAllocPd, nullptr, 0, &rep) != Status::kOk) return nullptr;
  return new Pd{ctx, rep.body.pd.pd};
}

int dealloc_pd(Pd* pd) {
  Request req{};
  req.body.pd.pd = pd->handle;
  Reply rep{};
  Status st = call(pd->context, req, MsgType::kDeallocPd, nullptr, 0, &rep);
  if (st == Status::kOk || st == Status::kWorkerGone) delete pd;
  return rc(st);
}

Mr* reg_mr(Pd* pd, void* addr, std::size_t length, int access) {
  Context* ctx = pd->context;
  auto a = reinterpret_cast<uintptr_t>(addr);
  int fd = -1;
  uintptr_t base = 0;
  bool huge = false;
  {
    std::lock_guard lock(ctx->buf_mu);
    auto it = ctx->buffers.upper_bound(a);
    if (it != ctx->buffers.begin()) {
      --it;
      if (a + length >= a && a + length <= it->first + it->second->size()) {
        fd = it->second->fd();
        base = it->first;
        huge = it->second->hugetlb();
      }
    }
  }
  if (fd < 0) {
    fail(Status::kNotShared, "%p+%zu is not inside one alloc_buf() buffer", addr, length);
    return nullptr;
  }
  Request req{};
  req.body.reg_mr.pd = pd->handle;
  req.body.reg_mr.access = static_cast<uint32_t>(access);
  req.body.reg_mr.addr = a;
  req.body.reg_mr.length = length;
  req.body.reg_mr.fd_offset = a - base;
  Reply rep{};
  if (call(ctx, req, MsgType::kRegMr, &fd, 1, &rep) != Status::kOk) return nullptr;
  auto* mr = new Mr{ctx, pd, addr, length, rep.body.reg_mr.lkey, rep.body.reg_mr.rkey, huge};
  uint32_t idx = mr_key_index(mr->lkey);
  if (idx < kMaxMrs) ctx->mrs[idx].store(mr, std::memory_order_release);
  return mr;
}

int dereg_mr(Mr* mr) {
  Context* ctx = mr->context;
  Request req{};
  req.body.dereg_mr.lkey = mr->lkey;
  Reply rep{};
  Status st = call(ctx, req, MsgType::kDeregMr, nullptr, 0, &rep);
  if (st == Status::kOk || st == Status::kWorkerGone) {
    uint32_t idx = mr_key_index(mr->lkey);
    Mr* expected = mr;
    if (idx < kMaxMrs) ctx->mrs[idx].compare_exchange_strong(expected, nullptr);
    const auto a = reinterpret_cast<uintptr_t>(mr->addr);
    delete mr;
    forget_adopted(ctx, a);
  }
  return rc(st);
}

int rereg_mr(Mr* mr, Pd* pd, int access) {
  Request req{};
  req.body.rereg_mr.lkey = mr->lkey;
  if (pd != nullptr) {
    req.body.rereg_mr.flags |= kReregPd;
    req.body.rereg_mr.pd = pd->handle;
  }
  if (access >= 0) {
    req.body.rereg_mr.flags |= kReregAccess;
    req.body.rereg_mr.access = static_cast<uint32_t>(access);
  }
  Reply rep{};
  const Status st = call(mr->context, req, MsgType::kReregMr, nullptr, 0, &rep);
  if (st == Status::kOk && pd != nullptr) mr->pd = pd;
  return rc(st);
}

CompChannel* create_comp_channel(Context* ctx) {
  auto ch = std::make_unique<CompChannel>();
  ch->context = ctx;
  ch->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ch->fd < 0) {
    fail(Status::kNoMemory, "eventfd: %s", std::strerror(errno));
    return nullptr;
  }
  ok();
  return ch.release();
}

int destroy_comp_channel(CompChannel* channel) {
  {
    std::lock_guard lock(channel->mu);
    if (!channel->cqs.empty()) return rc(fail(Status::kBusy, "CQs still use the channel"));
  }
  close(channel->fd);
  delete channel;
  return rc(ok());
}

int comp_channel_fd(const CompChannel* channel) { return channel->fd; }

int req_notify_cq(Cq* cq, int solicited_only) {
  (void)solicited_only;
  if (cq->channel == nullptr) return rc(fail(Status::kInvalidArgument, "CQ has no channel"));
  if (cq->notify->overrun.load(std::memory_order_acquire) != 0)
    return rc(fail(Status::kCqOverrun, "CQ overrun: a completion found it full"));
  cq->notify->armed.store(1, std::memory_order_relaxed);
  // Pairs with the worker's fence between publishing a CQE and reading
  // `armed`: a CQE published before the arm is seen by the caller's next poll.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return rc(ok());
}

int get_cq_event(CompChannel* channel, Cq** cq, void** cq_context, int timeout_ms) {
  for (;;) {
    {
      std::lock_guard lock(channel->mu);
      for (Cq* c : channel->cqs) {
        if (c->notify->fired.load(std::memory_order_acquire) != 0 &&
            c->notify->fired.exchange(0, std::memory_order_acq_rel) != 0) {
          *cq = c;
          if (cq_context != nullptr) *cq_context = c->cq_context;
          return rc(ok());
        }
      }
    }
    // The worker's socket too: a dead worker kicks no eventfd, and a caller
    // blocked here (timeout -1, as ibv_get_cq_event) would wait forever.
    // POLLRDHUP only: replies to control calls of other threads are theirs.
    Context* ctx = channel->context;
    pollfd p[2] = {{channel->fd, POLLIN, 0}, {ctx->sock, POLLRDHUP, 0}};
    int r = ::poll(p, 2, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return rc(fail(Status::kTimeout, "no CQ event within %d ms", timeout_ms));
    if ((p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0 || ctx->dead.load(std::memory_order_relaxed)) {
      ctx->dead = true;
      return rc(fail(Status::kWorkerGone, "worker gone"));
    }
    uint64_t v;
    ssize_t n = read(channel->fd, &v, sizeof v);
    (void)n;
  }
}

void ack_cq_events(Cq* cq, unsigned int nevents) {
  (void)cq;
  (void)nevents;
}

Cq* create_cq(Context* ctx, int cqe, void* cq_context, CompChannel* channel, bool timestamps) {
  if (cqe <= 0 || static_cast<uint32_t>(cqe) > ctx->max_depth) {
    fail(Status::kInvalidArgument, "cqe %d not in 1..%u", cqe, ctx->max_depth);
    return nullptr;
  }
  if (timestamps && ctx->version < 2) {
    fail(Status::kUnsupported, "completion timestamps need protocol v2");
    return nullptr;
  }
  uint32_t depth = round_up_pow2(static_cast<uint32_t>(cqe));
  auto cq = std::make_unique<Cq>();
  CqLayout layout = cq_layout(depth, timestamps);
  if (ShmRegion::create("tandem-cq", layout.bytes, ctx->attr.huge_queues, &cq->ring_memory) !=
      Status::kOk) {
    fail(Status::kNoMemory, "CQ ring of %zu bytes", layout.bytes);
    return nullptr;
  }
  Request req{};
  req.body.create_cq.depth = depth;
  req.body.create_cq.has_channel = channel != nullptr ? 1 : 0;
  req.body.create_cq.flags = timestamps ? kCqWithTimestamps : 0;
  Reply rep{};
  int fds[2] = {cq->ring_memory.fd(), channel != nullptr ? channel->fd : -1};
  Status st = call(ctx, req, MsgType::kCreateCq, fds, channel != nullptr ? 2 : 1, &rep);
  cq->ring_memory.close_fd();
  if (st != Status::kOk) return nullptr;
  uint8_t* base = cq->ring_memory.data();
  cq->context = ctx;
  cq->cq_context = cq_context;
  cq->channel = channel;
  cq->notify = reinterpret_cast<CqNotify*>(base + layout.notify);
  cq->cqe = static_cast<int>(depth);
  cq->handle = rep.body.cq.cq;
  cq->hugetlb = cq->ring_memory.hugetlb();
  cq->ring = RingReader<Cqe>(reinterpret_cast<RingControl*>(base + layout.control),
                             reinterpret_cast<Cqe*>(base + layout.entries), depth);
  cq->timestamps = timestamps ? reinterpret_cast<const uint64_t*>(base + layout.timestamps) : nullptr;
  cq->empty_polls = 0;
  if (channel != nullptr) {
    std::lock_guard lock(channel->mu);
    channel->cqs.push_back(cq.get());
  }
  return cq.release();
}

int destroy_cq(Cq* cq) {
  Request req{};
  req.body.destroy_cq.cq = cq->handle;
  Reply rep{};
  Status st = call(cq->context, req, MsgType::kDestroyCq, nullptr, 0, &rep);
  if (st == Status::kOk || st == Status::kWorkerGone) {
    if (CompChannel* ch = cq->channel) {
      std::lock_guard lock(ch->mu);
      auto it = std::find(ch->cqs.begin(), ch->cqs.end(), cq);
      if (it != ch->cqs.end()) ch->cqs.erase(it);
    }
    delete cq;
  }
  return rc(st);
}

int resize_cq(Cq* cq, int cqe) {
  Context* ctx = cq->context;
  if (cqe <= 0 || static_cast<uint32_t>(cqe) > ctx->max_depth)
    return rc(fail(Status::kInvalidArgument, "cqe %d not in 1..%u", cqe, ctx->max_depth));
  if (ctx->version < 2) return rc(fail(Status::kUnsupported, "resizing a CQ needs protocol v2"));
  const uint32_t depth = round_up_pow2(static_cast<uint32_t>(cqe));
  const CqLayout layout = cq_layout(depth, cq->timestamps != nullptr);
  ShmRegion memory;
  if (ShmRegion::create("tandem-cq", layout.bytes, ctx->attr.huge_queues, &memory) != Status::kOk)
    return rc(fail(Status::kNoMemory, "CQ ring of %zu bytes", layout.bytes));
  Request req{};
  req.body.resize_cq.cq = cq->handle;
  req.body.resize_cq.depth = depth;
  Reply rep{};
  int fd = memory.fd();
  const Status st = call(ctx, req, MsgType::kResizeCq, &fd, 1, &rep);
  memory.close_fd();
  if (st != Status::kOk) return rc(st);
  // The worker has moved what we had not polled to the new ring, at the same
  // indices: the reader picks up from its consumer index.
  uint8_t* base = memory.data();
  cq->ring = RingReader<Cqe>(reinterpret_cast<RingControl*>(base + layout.control),
                             reinterpret_cast<Cqe*>(base + layout.entries), depth);
  cq->notify = reinterpret_cast<CqNotify*>(base + layout.notify);
  if (cq->timestamps != nullptr) cq->timestamps = reinterpret_cast<const uint64_t*>(base + layout.timestamps);
  cq->hugetlb = memory.hugetlb();
  cq->cqe = static_cast<int>(depth);
  cq->ring_memory = std::move(memory);
  return 0;
}

Srq* create_srq(Pd* pd, uint32_t max_wr, uint32_t max_sge, void* srq_context, uint32_t limit) {
  Context* ctx = pd->context;
  if (limit != 0 && ctx->version < 2) {
    fail(Status::kUnsupported, "SRQ limits need a worker with asynchronous events (protocol v2)");
    return nullptr;
  }
  if (max_wr == 0 || max_wr > ctx->max_depth || max_sge > ctx->max_sge || limit > max_wr) {
    fail(Status::kInvalidArgument, "SRQ of %u WRs, %u SGEs (max %u, %u)", max_wr, max_sge, ctx->max_depth,
         ctx->max_sge);
    return nullptr;
  }
  const uint32_t depth = round_up_pow2(max_wr);
  auto srq = std::make_unique<Srq>();
  const SrqLayout layout = srq_layout(depth);
  if (ShmRegion::create("tandem-srq", layout.bytes, ctx->attr.huge_queues, &srq->ring_memory) != Status::kOk) {
    fail(Status::kNoMemory, "SRQ ring of %zu bytes", layout.bytes);
    return nullptr;
  }
  Request req{};
  req.body.create_srq.pd = pd->handle;
  req.body.create_srq.depth = depth;
  req.body.create_srq.limit = limit;
  Reply rep{};
  int fd = srq->ring_memory.fd();
  const Status st = call(ctx, req, MsgType::kCreateSrq, &fd, 1, &rep);
  srq->ring_memory.close_fd();
  if (st != Status::kOk) return nullptr;
  if (rep.body.create_srq.doorbell_bit >= kMaxQpsPerApp) {
    fail(Status::kProtocolError, "doorbell bit %u out of range", rep.body.create_srq.doorbell_bit);
    return nullptr;
  }
  uint8_t* base = srq->ring_memory.data();
  srq->context = ctx;
  srq->pd = pd;
  srq->srq_context = srq_context;
  srq->handle = rep.body.create_srq.srq;
  srq->max_wr = depth;
  srq->max_sge = max_sge == 0 ? 1 : max_sge;
  srq->doorbell_bit = rep.body.create_srq.doorbell_bit;
  srq->hugetlb = srq->ring_memory.hugetlb();
  srq->ring = RingWriter<RecvWqe>(reinterpret_cast<RingControl*>(base + layout.control),
                                  reinterpret_cast<RecvWqe*>(base + layout.entries), depth);
  ok();
  return srq.release();
}

int modify_srq(Srq* srq, uint32_t limit) {
  if (srq->context->version < 2) {
    return rc(fail(Status::kUnsupported, "SRQ limits need a worker with asynchronous events (protocol v2)"));
  }
  if (limit > srq->max_wr) return rc(fail(Status::kInvalidArgument, "limit %u over the SRQ's %u", limit, srq->max_wr));
  Request req{};
  req.body.modify_srq.srq = srq->handle;
  req.body.modify_srq.limit = limit;
  Reply rep{};
  return rc(call(srq->context, req, MsgType::kModifySrq, nullptr, 0, &rep));
}

int destroy_srq(Srq* srq) {
  Request req{};
  req.body.destroy_srq.srq = srq->handle;
  Reply rep{};
  const Status st = call(srq->context, req, MsgType::kDestroySrq, nullptr, 0, &rep);
  if (st == Status::kOk || st == Status::kWorkerGone) {
    delete srq;
  }
  return rc(st);
}

int post_srq_recv(Srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Context* ctx = srq->context;
  Status st = Status::kOk;
  std::lock_guard lock(srq->post_mu);
  if (ctx->dead.load(std::memory_order_relaxed)) st = fail(Status::kWorkerGone, "worker gone");
  for (; st == Status::kOk && wr != nullptr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > srq->max_sge ||
        (wr->num_sge > 0 && wr->sg_list == nullptr)) {
      st = fail(Status::kInvalidArgument, "num_sge %d (max %u)", wr->num_sge, srq->max_sge);
      break;
    }
    bool keys = true;
    for (int i = 0; i < wr->num_sge && keys; ++i) keys = find_mr(ctx, wr->sg_list[i].lkey) != nullptr;
    if (!keys) {
      st = fail(Status::kBadLkey, "SRQ WR with an unknown lkey");
      break;
    }
    RecvWqe* w = srq->ring.claim();
    if (w == nullptr) {
      st = srq->ring.corrupt() ? fail(Status::kProtocolError, "SRQ indices corrupt")
                               : fail(Status::kQueueFull, "SRQ %u full", srq->handle);
      break;
    }
    w->wr_id = wr->wr_id;
    w->num_sge = static_cast<uint32_t>(wr->num_sge);
    for (int i = 0; i < wr->num_sge; ++i) w->sge[i] = to_wqe_sge(ctx, wr->sg_list[i]);
  }
  if (srq->ring.unpublished() != 0) {
    srq->ring.publish();
    ring_doorbell(ctx, srq->doorbell_bit);
  }
  if (st != Status::kOk) {
    if (bad_wr != nullptr) *bad_wr = wr;
    return rc(st);
  }
  return 0;
}

Qp* create_qp(Pd* pd, QpInitAttr* attr) {
  Context* ctx = pd->context;
  if (attr == nullptr || attr->send_cq == nullptr || attr->recv_cq == nullptr) {
    fail(Status::kInvalidArgument, "send_cq and recv_cq are required");
    return nullptr;
  }
  if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UD) {
    fail(Status::kUnsupported, "only RC and UD QPs");
    return nullptr;
  }
  ibv_qp_cap& cap = attr->cap;
  if (attr->srq != nullptr) {
    if (attr->srq->context != ctx) {
      fail(Status::kInvalidArgument, "SRQ of another context");
      return nullptr;
    }
    cap.max_recv_wr = 0;  // verbs ignores them with an SRQ
    cap.max_recv_sge = 0;
  }
  if (cap.max_send_wr > ctx->max_depth || cap.max_recv_wr > ctx->max_depth ||
      cap.max_send_sge > ctx->max_sge || cap.max_recv_sge > ctx->max_sge ||
      cap.max_inline_data > ctx->max_inline) {
    fail(Status::kInvalidArgument, "caps over the limits (depth %u, sge %u, inline %u)",
         ctx->max_depth, ctx->max_sge, ctx->max_inline);
    return nullptr;
  }
  uint32_t sq_depth = round_up_pow2(cap.max_send_wr == 0 ? 1 : cap.max_send_wr);
  uint32_t rq_depth = round_up_pow2(cap.max_recv_wr == 0 ? 1 : cap.max_recv_wr);
  auto qp = std::make_unique<Qp>();
  QpQueueLayout layout = qp_queue_layout(sq_depth, rq_depth);
  if (ShmRegion::create("tandem-qp", layout.bytes, ctx->attr.huge_queues, &qp->queue_memory) !=
      Status::kOk) {
    fail(Status::kNoMemory, "QP rings of %zu bytes", layout.bytes);
    return nullptr;
  }
  Request req{};
  CreateQpRequest& c = req.body.create_qp;
  c.pd = pd->handle;
  c.send_cq = attr->send_cq->handle;
  c.recv_cq = attr->recv_cq->handle;
  c.sq_depth = sq_depth;
  c.rq_depth = rq_depth;
  c.qp_type = attr->qp_type;
  c.sq_sig_all = attr->sq_sig_all != 0 ? 1 : 0;
  c.srq = attr->srq != nullptr ? attr->srq->handle : 0;
  Reply rep{};
  int fd = qp->queue_memory.fd();
  Status st = call(ctx, req, MsgType::kCreateQp, &fd, 1, &rep);
  qp->queue_memory.close_fd();
  if (st != Status::kOk) return nullptr;
  cap.max_send_wr = sq_depth;
  cap.max_recv_wr = rq_depth;
  if (cap.max_send_sge == 0) cap.max_send_sge = 1;
  if (cap.max_recv_sge == 0 && attr->srq == nullptr) cap.max_recv_sge = 1;
  if (attr->srq != nullptr) cap.max_recv_wr = 0;
  uint8_t* base = qp->queue_memory.data();
  qp->context = ctx;
  qp->pd = pd;
  qp->send_cq = attr->send_cq;
  qp->recv_cq = attr->recv_cq;
  qp->qp_context = attr->qp_context;
  qp->qp_num = rep.body.create_qp.qpn;
  qp->state = IBV_QPS_RESET;
  qp->qp_type = attr->qp_type;
  qp->cap = cap;
  qp->hugetlb = qp->queue_memory.hugetlb();
  qp->doorbell_bit = rep.body.create_qp.doorbell_bit;
  qp->srq = attr->srq;
  qp->sq_flushing = qp->rq_flushing = false;
  qp->sq_flush_at = qp->rq_flush_at = 0;
  qp->sq = RingWriter<SendWqe>(reinterpret_cast<RingControl*>(base + layout.sq_control),
                               reinterpret_cast<SendWqe*>(base + layout.sq_entries), sq_depth);
  qp->rq = RingWriter<RecvWqe>(reinterpret_cast<RingControl*>(base + layout.rq_control),
                               reinterpret_cast<RecvWqe*>(base + layout.rq_entries), rq_depth);
  if (qp->doorbell_bit >= kMaxQpsPerApp) {
    fail(Status::kProtocolError, "doorbell bit %u out of range", qp->doorbell_bit);
    return nullptr;
  }
  for (Cq* c : {attr->send_cq, attr->recv_cq}) {
    std::lock_guard lock(c->qps_mu);
    if (std::find(c->qps.begin(), c->qps.end(), qp.get()) == c->qps.end()) c->qps.push_back(qp.get());
  }
  return qp.release();
}

// Must not run while another thread polls this CQ (as resize_cq).
static void clean_cq(Cq* cq, uint32_t qpn) {
  if (cq == nullptr) return;
  auto* ts = const_cast<uint64_t*>(cq->timestamps);
  cq->ring.remove_if([qpn](const Cqe& c) { return c.qp_num == qpn; },
                     [ts](uint32_t from, uint32_t to) {
                       if (ts != nullptr) ts[to] = ts[from];
                     });
}

int modify_qp(Qp* qp, ibv_qp_attr* attr, int attr_mask) {
  if (attr == nullptr) return rc(fail(Status::kInvalidArgument, "null attr"));
  Request req{};
  ModifyQpRequest& m = req.body.modify_qp;
  m.qpn = qp->qp_num;
  m.attr_mask = static_cast<uint32_t>(attr_mask);
  m.qp_state = attr->qp_state;
  m.path_mtu = attr->path_mtu;
  m.dest_qp_num = attr->dest_qp_num;
  m.rq_psn = attr->rq_psn;
  m.sq_psn = attr->sq_psn;
  m.qp_access_flags = attr->qp_access_flags;
  std::memcpy(m.dgid, attr->ah_attr.grh.dgid.raw, sizeof m.dgid);
  m.sgid_index = attr->ah_attr.grh.sgid_index;
  m.port_num = attr->port_num;
  m.timeout = attr->timeout;
  m.retry_cnt = attr->retry_cnt;
  m.rnr_retry = attr->rnr_retry;
  m.min_rnr_timer = attr->min_rnr_timer;
  m.max_rd_atomic = attr->max_rd_atomic;
  m.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  m.qkey = attr->qkey;
  Reply rep{};
  Status st = call(qp->context, req, MsgType::kModifyQp, nullptr, 0, &rep);
  if (st != Status::kOk) return rc(st);
  qp->state = static_cast<ibv_qp_state>(rep.body.modify_qp.qp_state);
  if (qp->state == IBV_QPS_RESET) {
    // As RNICs' libraries do (mlx5_cq_clean): the QP's completions still in
    // its CQs go, so a QP used again does not find its old life's flushes.
    // The worker writes none for a QP in RESET from now on.
    clean_cq(qp->recv_cq, qp->qp_num);
    if (qp->send_cq != qp->recv_cq) clean_cq(qp->send_cq, qp->qp_num);
    // The worker dropped whatever was queued; start over from its consumer index.
    uint8_t* base = qp->queue_memory.data();
    QpQueueLayout layout = qp_queue_layout(qp->sq.depth(), qp->rq.depth());
    qp->sq = RingWriter<SendWqe>(reinterpret_cast<RingControl*>(base + layout.sq_control),
                                 reinterpret_cast<SendWqe*>(base + layout.sq_entries),
                                 qp->sq.depth());
    qp->rq = RingWriter<RecvWqe>(reinterpret_cast<RingControl*>(base + layout.rq_control),
                                 reinterpret_cast<RecvWqe*>(base + layout.rq_entries),
                                 qp->rq.depth());
  }
  return 0;
}

int query_qp_state(Qp* qp) {
  Request req{};
  req.body.query_qp.qpn = qp->qp_num;
  Reply rep{};
  const Status st = call(qp->context, req, MsgType::kQueryQp, nullptr, 0, &rep);
  if (st == Status::kWorkerGone) qp->state = IBV_QPS_ERR;
  if (st != Status::kOk) return rc(st);
  qp->state = static_cast<ibv_qp_state>(rep.body.modify_qp.qp_state);
  return 0;
}

int destroy_qp(Qp* qp) {
  Request req{};
  req.body.destroy_qp.qpn = qp->qp_num;
  Reply rep{};
  Status st = call(qp->context, req, MsgType::kDestroyQp, nullptr, 0, &rep);
  if (st == Status::kOk || st == Status::kWorkerGone) {
    for (Cq* c : {qp->send_cq, qp->recv_cq}) {
      std::lock_guard lock(c->qps_mu);
      c->qps.erase(std::remove(c->qps.begin(), c->qps.end(), qp), c->qps.end());
    }
    delete qp;
  }
  return rc(st);
}

int post_send(Qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Context* ctx = qp->context;
  Status st = Status::kOk;
  if (ctx->dead.load(std::memory_order_relaxed)) {
    st = fail(Status::kWorkerGone, "worker gone");
  } else if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD && qp->state != IBV_QPS_ERR) {
    st = fail(Status::kBadState, "post_send on QP %u needs RTS", qp->qp_num);
  }
  for (; st == Status::kOk && wr != nullptr; wr = wr->next) {
    bool inl = (wr->send_flags & IBV_SEND_INLINE) != 0;
    if (!supported_send_opcode(wr->opcode)) {
      st = fail(Status::kUnsupported, "send opcode %d", static_cast<int>(wr->opcode));
      break;
    }
    const bool ud = qp->qp_type == IBV_QPT_UD;
    if (ud && ((wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) || wr->wr.ud.ah == nullptr ||
               reinterpret_cast<const Ah*>(wr->wr.ud.ah)->owner != ctx)) {
      st = fail(Status::kInvalidArgument, "UD send needs SEND(_WITH_IMM) and an AH of this context");
      break;
    }
    if (wr->num_sge < 0 || (!inl && static_cast<uint32_t>(wr->num_sge) > qp->cap.max_send_sge) ||
        (wr->num_sge > 0 && wr->sg_list == nullptr)) {
      st = fail(Status::kInvalidArgument, "num_sge %d (max %u)", wr->num_sge,
                qp->cap.max_send_sge);
      break;
    }
    // An atomic lands in one 8-byte entry (the worker checks its MR as for any SGE).
    if (is_atomic(wr->opcode) && (inl || wr->num_sge != 1 || wr->sg_list[0].length != 8)) {
      st = fail(Status::kInvalidArgument, "an atomic needs one 8-byte SGE");
      break;
    }
    uint64_t inline_len = 0;
    if (inl) {
      for (int i = 0; i < wr->num_sge; ++i) inline_len += wr->sg_list[i].length;
      if (wr->opcode == IBV_WR_RDMA_READ || inline_len > qp->cap.max_inline_data) {
        st = fail(Status::kInvalidArgument, "inline of %lu bytes (max %u)",
                  static_cast<unsigned long>(inline_len), qp->cap.max_inline_data);
        break;
      }
    }
    SendWqe* w = qp->sq.claim_outstanding();
    if (w == nullptr) {
      st = qp->sq.corrupt() ? fail(Status::kProtocolError, "SQ indices corrupt")
                            : fail(Status::kQueueFull, "SQ of QP %u full", qp->qp_num);
      break;
    }
    w->wr_id = wr->wr_id;
    if (ud) {
      const Ah* ah = reinterpret_cast<const Ah*>(wr->wr.ud.ah);
      w->remote_addr = uint64_t{wr->wr.ud.remote_qpn & 0xFFFFFF} << 32 | ah->ipv4;
      w->rkey = wr->wr.ud.remote_qkey;
    } else if (is_atomic(wr->opcode)) {
      w->remote_addr = wr->wr.atomic.remote_addr;
      w->rkey = wr->wr.atomic.rkey;
    } else {
      w->remote_addr = wr->wr.rdma.remote_addr;
      w->rkey = wr->wr.rdma.rkey;
    }
    w->imm_data = wr->imm_data;
    w->send_flags = wr->send_flags;
    w->opcode = static_cast<uint8_t>(wr->opcode);
    if (inl) {
      w->num_sge = 0;
      w->inline_len = static_cast<uint16_t>(inline_len);
      std::size_t at = 0;
      for (int i = 0; i < wr->num_sge; ++i) {
        const ibv_sge& s = wr->sg_list[i];
        std::memcpy(w->inline_data + at, reinterpret_cast<const void*>(s.addr), s.length);
        at += s.length;
      }
    } else {
      w->num_sge = static_cast<uint8_t>(wr->num_sge);
      w->inline_len = 0;
      for (int i = 0; i < wr->num_sge; ++i) w->sge[i] = to_wqe_sge(ctx, wr->sg_list[i]);
      if (is_atomic(wr->opcode)) {
        w->atomic.compare_add = wr->wr.atomic.compare_add;
        w->atomic.swap = wr->wr.atomic.swap;
      }
    }
  }
  if (qp->sq.unpublished() != 0) {
    qp->sq.publish();
    ring_doorbell(ctx, qp->doorbell_bit);
  }
  if (st != Status::kOk) {
    if (bad_wr != nullptr) *bad_wr = wr;
    return rc(st);
  }
  return 0;
}

int post_recv(Qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Context* ctx = qp->context;
  Status st = Status::kOk;
  if (ctx->dead.load(std::memory_order_relaxed)) {
    st = fail(Status::kWorkerGone, "worker gone");
  } else if (qp->state == IBV_QPS_RESET) {
    st = fail(Status::kBadState, "post_recv on QP %u in RESET", qp->qp_num);
  } else if (qp->srq != nullptr) {
    st = fail(Status::kInvalidArgument, "QP %u receives from an SRQ", qp->qp_num);
  }
  for (; st == Status::kOk && wr != nullptr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_recv_sge ||
        (wr->num_sge > 0 && wr->sg_list == nullptr)) {
      st = fail(Status::kInvalidArgument, "num_sge %d (max %u)", wr->num_sge,
                qp->cap.max_recv_sge);
      break;
    }
    RecvWqe* w = qp->rq.claim_outstanding();
    if (w == nullptr) {
      st = qp->rq.corrupt() ? fail(Status::kProtocolError, "RQ indices corrupt")
                            : fail(Status::kQueueFull, "RQ of QP %u full", qp->qp_num);
      break;
    }
    w->wr_id = wr->wr_id;
    w->num_sge = static_cast<uint32_t>(wr->num_sge);
    for (int i = 0; i < wr->num_sge; ++i) w->sge[i] = to_wqe_sge(ctx, wr->sg_list[i]);
  }
  if (qp->rq.unpublished() != 0) {
    qp->rq.publish();
    ring_doorbell(ctx, qp->doorbell_bit);
  }
  if (st != Status::kOk) {
    if (bad_wr != nullptr) *bad_wr = wr;
    return rc(st);
  }
  return 0;
}

namespace {

ibv_wc_opcode wc_opcode_of(uint8_t wr_opcode) {
  switch (wr_opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    default: return IBV_WC_SEND;
  }
}

// The worker is gone: the WQEs it never finished complete here, as a dying
// device's QPs would flush them. Returns how many were written to wc.
int flush_dead(Cq* cq, int n, ibv_wc* wc) {
  std::lock_guard lock(cq->qps_mu);
  int got = 0;
  auto put = [&](Qp* qp, uint64_t wr_id, ibv_wc_opcode op) {
    ibv_wc& w = wc[got++];
    std::memset(&w, 0, sizeof w);
    w.wr_id = wr_id;
    w.status = IBV_WC_WR_FLUSH_ERR;
    w.opcode = op;
    w.qp_num = qp->qp_num;
  };
  for (Qp* qp : cq->qps) {
    if (got == n) break;
    qp->state = IBV_QPS_ERR;
    if (qp->send_cq == cq) {
      if (!qp->sq_flushing) {
        qp->sq_flush_at = qp->sq.completed();
        qp->sq_flushing = true;
      }
      const uint32_t end = qp->sq.produced();
      if (end - qp->sq_flush_at > qp->sq.depth()) qp->sq_flush_at = end;  // a scribbled index: nothing to trust
      for (; qp->sq_flush_at != end && got < n; ++qp->sq_flush_at) {
        const SendWqe& w = qp->sq.at(qp->sq_flush_at);
        put(qp, w.wr_id, wc_opcode_of(w.opcode));
      }
    }
    if (qp->recv_cq == cq && qp->srq == nullptr) {
      if (!qp->rq_flushing) {
        qp->rq_flush_at = qp->rq.completed();
        qp->rq_flushing = true;
      }
      const uint32_t end = qp->rq.produced();
      if (end - qp->rq_flush_at > qp->rq.depth()) qp->rq_flush_at = end;
      for (; qp->rq_flush_at != end && got < n; ++qp->rq_flush_at) put(qp, qp->rq.at(qp->rq_flush_at).wr_id, IBV_WC_RECV);
    }
  }
  return got;
}

}  // namespace

int poll_cq(Cq* cq, int num_entries, ibv_wc* wc, uint64_t* timestamps) {
  if (num_entries <= 0) return 0;
  uint32_t avail = cq->ring.available();
  if (cq->ring.corrupt()) return -rc(fail(Status::kProtocolError, "CQ indices corrupt"));
  if (avail == 0) {
    if (cq->notify->overrun.load(std::memory_order_acquire) != 0)
      return -rc(fail(Status::kCqOverrun, "CQ overrun: a completion found it full"));
    // An empty CQ is the only sign a dead worker gives on the fast path:
    // check the socket now and then, not on every poll.
    if (cq->context->dead.load(std::memory_order_relaxed) ||
        (++cq->empty_polls % 4096 == 0 && !worker_alive(cq->context))) {
      if (const int flushed = flush_dead(cq, num_entries, wc); flushed > 0) {
        if (timestamps != nullptr) std::fill(timestamps, timestamps + flushed, 0);  // never written by the worker
        return flushed;
      }
      return -rc(fail(Status::kWorkerGone, "worker gone"));
    }
    return 0;
  }
  uint32_t n = avail < static_cast<uint32_t>(num_entries) ? avail : static_cast<uint32_t>(num_entries);
  for (uint32_t i = 0; i < n; ++i) {
    const Cqe& c = *cq->ring.peek(i);
    ibv_wc& w = wc[i];
    std::memset(&w, 0, sizeof w);
    w.wr_id = c.wr_id;
    w.status = static_cast<ibv_wc_status>(c.status);
    w.opcode = static_cast<ibv_wc_opcode>(c.opcode);
    w.vendor_err = c.vendor_err;
    w.byte_len = c.byte_len;
    w.imm_data = c.imm_data;
    w.qp_num = c.qp_num;
    w.src_qp = c.src_qp;
    w.wc_flags = c.wc_flags;
    // A datagram's GRH holds an IPv4 header (RoCEv2 over IPv4). ibv_wc has no field
    // for that; RoCE devices report it in sl as the packet's L3 type (mlx5: bit 3 UDP,
    // bits 2:0 0x2 IPv4), which UCX's ud_verbs reads to find the destination GID.
    if (c.wc_flags & IBV_WC_GRH) w.sl = 0xA;
    if (timestamps != nullptr) timestamps[i] = cq->timestamps != nullptr ? cq->timestamps[cq->ring.slot(i)] : 0;
  }
  cq->ring.release(n);
  return static_cast<int>(n);
}

bool worker_alive(Context* ctx) {
  if (ctx->dead.load(std::memory_order_relaxed)) return false;
  pollfd p{ctx->sock, POLLIN, 0};
  if (::poll(&p, 1, 0) > 0) {
    char b;
    if ((p.revents & (POLLHUP | POLLERR)) != 0 ||
        recv(ctx->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
      ctx->dead = true;
      return false;
    }
  }
  return true;
}

}  // namespace tandem::rnic::host
