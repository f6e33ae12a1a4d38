// PDs, MRs, completion channels, CQs and RC QPs of the drop-in libibverbs, each
// an ibv_* struct (what the application holds) in front of its rnic/host
// object; the context's ops table sends the header's inline post/poll verbs
// to rnic/host's rings. Memory the application allocated itself is moved onto
// a memfd at the same address before it is registered (host::adopt_buf).
#include <infiniband/verbs.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "rnic/host/verbs.h"
#include "rnic/verbs/cq.h"
#include "rnic/verbs/device.h"
#include "rnic/verbs/qp_ex.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

namespace th = tandem::rnic::host;
using namespace tandem::rnic::verbs;

namespace {

// A parent domain (ibv_alloc_parent_domain) is a TandemPd over its protection
// domain's host PD: every verb that takes a PD takes it, and protection is the
// protection domain's. Its allocators are kept, not called: a Tandem queue is
// memory the worker maps (a memfd), never a provider buffer an allocator could give.
struct TandemPd {
  ibv_pd pd;
  th::Pd* h;
  TandemPd* protection = nullptr;    // set: a parent domain over this PD
  std::atomic<uint32_t> parents{0};  // parent domains over this PD (EBUSY on its dealloc)
  ibv_parent_domain_init_attr parent{};
};
struct TandemMr {
  ibv_mr mr;
  th::Mr* h;
  unsigned access;  // as registered (ibv_rereg_mr keeps it unless told otherwise)
};
struct TandemChannel {
  ibv_comp_channel ch;
  th::CompChannel* h;
};
struct TandemSrq {
  ibv_srq srq;
  th::Srq* h;
  uint32_t limit = 0;             // armed srq_limit, for ibv_query_srq (0 once its event fired)
  uint32_t events_delivered = 0;  // as TandemCq's, under srq.mutex
};
struct TandemQp : QpHead {  // QpHead first: the ibv_qp (or ibv_qp_ex) the application holds
  ibv_qp_init_attr init;  // as granted, for ibv_query_qp
  ibv_qp_attr attr;       // what modify_qp set, mask by mask
  std::mutex mu;
  uint32_t events_delivered = 0;  // as TandemCq's, under qp.mutex
};

// Registers an object under the handle async events name it by, or takes it
// off (before it is destroyed: no event is handed out for it after that).
template <class Map, class Obj>
void enlist(ibv_context* ctx, Map TandemContext::*map, uint32_t key, Obj* obj) {
  TandemContext* c = context_of(ctx);
  std::lock_guard g(c->objs_mu);
  if (obj != nullptr) (c->*map)[key] = obj;
  else (c->*map).erase(key);
}

// Waits until the application acknowledged every async event handed out for
// the object (rdma-core's rule for ibv_destroy_*), on its own mutex and cond.
void wait_acks(pthread_mutex_t* mu, pthread_cond_t* cond, const uint32_t* delivered, const uint32_t* completed) {
  pthread_mutex_lock(mu);
  while (*delivered != *completed) pthread_cond_wait(cond, mu);
  pthread_mutex_unlock(mu);
}

template <class T, class S>
T* of(S* s) {
  return reinterpret_cast<T*>(s);
}

// rnic/host's Status as the errno libibverbs would give.
int to_errno(int st) {
  switch (static_cast<th::Status>(st)) {
    case th::Status::kOk: return 0;
    case th::Status::kWorkerGone: return EIO;
    case th::Status::kTimeout: return ETIMEDOUT;
    case th::Status::kInvalidArgument: return EINVAL;
    case th::Status::kQueueFull: return ENOMEM;
    case th::Status::kNoMemory: return ENOMEM;
    case th::Status::kNotShared: return EFAULT;
    case th::Status::kNoResources: return ENOMEM;
    case th::Status::kNotFound: return ENOENT;
    case th::Status::kBadLkey: return EINVAL;
    case th::Status::kBadState: return EINVAL;
    case th::Status::kBusy: return EBUSY;
    case th::Status::kBadRegion: return EFAULT;
    case th::Status::kUnsupported: return EOPNOTSUPP;
    case th::Status::kCqOverrun: return EIO;
    // A tenant's share used up: EAGAIN as the kernel's rdma cgroup answers a
    // charge over its hca_object limit; bytes: ENOMEM as ib_umem_get does over
    // RLIMIT_MEMLOCK. The worker's own tables full stay ENOMEM (kNoResources).
    case th::Status::kOverLimit: return EAGAIN;
    case th::Status::kOverByteLimit: return ENOMEM;
    default: return EINVAL;
  }
}
int last_errno() { return to_errno(static_cast<int>(th::last_status())); }
template <class T>
T* null_errno() {
  errno = last_errno();
  return nullptr;
}

// Applications wait for completions by spinning on ibv_poll_cq (perftest,
// UCX). A hardware RNIC does not need the CPU they spin on; Tandem's worker may:
// where it shares cores with the application (tests, a small VM, an
// oversubscribed host), the spin delays the very completion it waits for. So
// after kSpinPolls empty polls in a row, every kYieldEvery-th empty poll
// yields the core. With a core of its own nothing else is runnable and
// sched_yield returns at once (a syscall, ~0.3 us per ~2 us of polling, only
// once the wait is already ~10 us long); TANDEM_POLL_YIELD=0 turns it off.
constexpr uint32_t kSpinPolls = 1024;
constexpr uint32_t kYieldEvery = 256;
const bool kPollYield = [] {
  const char* e = secure_getenv("TANDEM_POLL_YIELD");
  return e == nullptr || std::strcmp(e, "0") != 0;
}();

int ops_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  const int r = poll_counted(of<TandemCq>(cq), n, wc, nullptr);
  return r >= 0 ? r : -1;  // libibverbs: negative on error
}
int ops_req_notify(ibv_cq* cq, int solicited_only) {
  return to_errno(th::req_notify_cq(of<TandemCq>(cq)->h, solicited_only));
}
int ops_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  return to_errno(th::post_send(of<TandemQp>(qp)->h, wr, bad));
}
int ops_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return to_errno(th::post_recv(of<TandemQp>(qp)->h, wr, bad));
}
int ops_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return to_errno(th::post_srq_recv(of<TandemSrq>(srq)->h, wr, bad));
}

// Access flags rdma-core lets a caller pass as optional (and drop).
constexpr unsigned kAccessKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_ATOMIC;

ibv_qp* ops_create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* a);
ibv_cq_ex* ops_create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* a);
int ops_query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                        size_t attr_size);
int ops_query_rt_values(ibv_context* context, ibv_values_ex* values);
ibv_pd* ops_alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* a);

// ibv_create_cq and ibv_create_cq_ex: the host CQ (completion timestamps beside
// the ring when asked) behind a TandemCq. cqe over the device's max_cqe and a
// comp_vector outside [0, num_comp_vectors) are EINVAL, as verbs documents.
TandemCq* make_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector,
                  bool timestamps) {
  if (context == nullptr || cqe <= 0 || static_cast<uint32_t>(cqe) > th::kMaxQueueDepth || comp_vector < 0 ||
      comp_vector >= context->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  auto* c = new TandemCq{};
  th::Cq* h = th::create_cq(context_of(context)->host, cqe, c,  // host cq_context: back to us
                            channel ? of<TandemChannel>(channel)->h : nullptr, timestamps);
  if (h == nullptr) {
    delete c;
    errno = last_errno();
    return nullptr;
  }
  c->cq.context = context;
  c->cq.channel = channel;
  c->cq.cq_context = cq_context;
  c->cq.handle = h->handle;
  c->cq.cqe = h->cqe;
  pthread_mutex_init(&c->cq.mutex, nullptr);
  pthread_cond_init(&c->cq.cond, nullptr);
  c->h = h;
  enlist(context, &TandemContext::cqs, c->cq.handle, &c->cq);
  return c;
}

}  // namespace

namespace tandem::rnic::verbs {
int poll_counted(TandemCq* c, int n, ibv_wc* wc, uint64_t* timestamps) {
  const int r = th::poll_cq(c->h, n, wc, timestamps);
  if (r != 0) {
    if (c->empty_polls.load(std::memory_order_relaxed) != 0) c->empty_polls.store(0, std::memory_order_relaxed);
    return r;
  }
  // Relaxed load and store, not an atomic add: threads polling one CQ at once
  // may lose a count, which only moves a yield.
  const uint32_t k = c->empty_polls.load(std::memory_order_relaxed) + 1;
  c->empty_polls.store(k, std::memory_order_relaxed);
  if (kPollYield && k >= kSpinPolls && k % kYieldEvery == 0) sched_yield();
  return 0;
}
}  // namespace tandem::rnic::verbs

namespace tandem::rnic::verbs {
int errno_of(int status) { return to_errno(status); }
th::Pd* host_pd_of(ibv_pd* pd) { return of<TandemPd>(pd)->h; }

void install_ops(ibv_context& ctx) {
  // The extended QP verb the header's inline ibv_create_qp_ex reaches (verbs_get_ctx_op).
  if (verbs_context* v = verbs_get_ctx(&ctx)) {
    v->create_qp_ex = ops_create_qp_ex;
    v->create_cq_ex = ops_create_cq_ex;
    v->query_device_ex = ops_query_device_ex;
    v->query_rt_values = ops_query_rt_values;
    v->alloc_parent_domain = ops_alloc_parent_domain;
  }
  ctx.ops.poll_cq = ops_poll_cq;
  ctx.ops.req_notify_cq = ops_req_notify;
  ctx.ops.post_send = ops_post_send;
  ctx.ops.post_recv = ops_post_recv;
  ctx.ops.post_srq_recv = ops_post_srq_recv;
}
}  // namespace tandem::rnic::verbs

extern "C" {

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  if (context == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  th::Pd* h = th::alloc_pd(context_of(context)->host);
  if (h == nullptr) return null_errno<ibv_pd>();
  auto* p = new TandemPd{};
  p->pd.context = context;
  p->pd.handle = h->handle;
  p->h = h;
  return &p->pd;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  if (pd == nullptr) return EINVAL;
  TandemPd* p = of<TandemPd>(pd);
  if (p->protection != nullptr) {  // a parent domain: its protection domain stays
    p->protection->parents.fetch_sub(1, std::memory_order_relaxed);
    delete p;
    return 0;
  }
  if (p->parents.load(std::memory_order_relaxed) != 0) return EBUSY;
  const int rc = to_errno(th::dealloc_pd(of<TandemPd>(pd)->h));
  if (rc == 0 || th::last_status() == th::Status::kWorkerGone) delete of<TandemPd>(pd);
  return rc == EIO ? 0 : rc;
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  if (pd == nullptr || length == 0) {
    errno = EINVAL;
    return nullptr;
  }
  access &= ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
  if (iova != reinterpret_cast<uintptr_t>(addr) || (access & ~kAccessKnown) != 0) {
    errno = EOPNOTSUPP;  // an IOVA other than the address, ODP and the like
    return nullptr;
  }
  // Remote atomic access lets the port's atomics (IBV_WR_ATOMIC_*) reach the MR; it needs
  // local write, as the kernel requires.
  if ((access & IBV_ACCESS_REMOTE_ATOMIC) != 0 && (access & IBV_ACCESS_LOCAL_WRITE) == 0) {
    errno = EINVAL;
    return nullptr;
  }
  TandemPd* p = of<TandemPd>(pd);
  if (th::adopt_buf(p->h->context, addr, length) != 0) return null_errno<ibv_mr>();
  th::Mr* h = th::reg_mr(p->h, addr, length, static_cast<int>(access));
  if (h == nullptr) return null_errno<ibv_mr>();
  auto* m = new TandemMr{};
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.handle = h->lkey;
  m->mr.lkey = h->lkey;
  m->mr.rkey = h->rkey;
  m->h = h;
  m->access = access;
  return &m->mr;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uintptr_t>(addr), static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova, static_cast<unsigned>(access));
}

int ibv_dereg_mr(ibv_mr* mr) {
  if (mr == nullptr) return EINVAL;
  const int rc = to_errno(th::dereg_mr(of<TandemMr>(mr)->h));
  if (rc == 0 || rc == EIO) delete of<TandemMr>(mr);
  return rc == EIO ? 0 : rc;
}

// ibv_rereg_mr: a new PD or access is changed in place by the worker (keys kept,
// so peers holding the rkey see the change); a new translation is a new
// registration with new keys, the old one dropped after it (libibverbs reads
// the keys back from the MR). Errors: IBV_REREG_MR_ERR_INPUT or _CMD, errno set.
int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  const auto input_error = [] {
    errno = EINVAL;
    return static_cast<int>(IBV_REREG_MR_ERR_INPUT);
  };
  if (mr == nullptr || flags == 0 || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) != 0) return input_error();
  const bool new_pd = (flags & IBV_REREG_MR_CHANGE_PD) != 0, new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) != 0;
  if ((new_pd && pd == nullptr) || (!new_access && access != 0)) return input_error();
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0 && (addr == nullptr || length == 0)) return input_error();
  auto acc = static_cast<unsigned>(access) & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
  if (new_access && ((acc & ~kAccessKnown) != 0 ||
                     ((acc & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
                      (acc & IBV_ACCESS_LOCAL_WRITE) == 0))) {
    return input_error();
  }
  TandemMr* m = of<TandemMr>(mr);
  const auto cmd_error = [](int err) {
    errno = err;
    return static_cast<int>(IBV_REREG_MR_ERR_CMD);
  };
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) == 0) {
    const int rc = to_errno(th::rereg_mr(m->h, new_pd ? of<TandemPd>(pd)->h : nullptr,
                                         new_access ? static_cast<int>(acc) : -1));
    if (rc != 0) return cmd_error(rc);
  } else {
    ibv_pd* to = new_pd ? pd : mr->pd;
    const unsigned a = new_access ? acc : m->access;
    if (th::adopt_buf(of<TandemPd>(to)->h->context, addr, length) != 0) return cmd_error(last_errno());
    th::Mr* h = th::reg_mr(of<TandemPd>(to)->h, addr, length, static_cast<int>(a));
    if (h == nullptr) return cmd_error(last_errno());
    if (const int rc = to_errno(th::dereg_mr(m->h)); rc != 0 && rc != EIO) {
      th::dereg_mr(h);
      return cmd_error(rc);
    }
    m->h = h;
    mr->addr = addr;
    mr->length = length;
    mr->handle = h->lkey;
    mr->lkey = h->lkey;
    mr->rkey = h->rkey;
  }
  if (new_pd) mr->pd = pd;
  if (new_access) m->access = acc;
  return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  if (context == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  th::CompChannel* h = th::create_comp_channel(context_of(context)->host);
  if (h == nullptr) return null_errno<ibv_comp_channel>();
  auto* c = new TandemChannel{};
  c->ch.context = context;
  // The application gets an epoll fd watching the channel's eventfd, not the eventfd itself: the
  // worker keeps that one O_NONBLOCK for its own safety, and the flag is shared by every copy, so
  // O_NONBLOCK on the application's fd (UCX sets it and wants EAGAIN) must live on a file of its
  // own. It is pollable as the eventfd is; ibv_get_cq_event honours its mode.
  c->ch.fd = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (c->ch.fd < 0 || epoll_ctl(c->ch.fd, EPOLL_CTL_ADD, th::comp_channel_fd(h), &ev) != 0) {
    const int e = errno;
    if (c->ch.fd >= 0) close(c->ch.fd);
    th::destroy_comp_channel(h);
    delete c;
    errno = e;
    return nullptr;
  }
  c->ch.refcnt = 0;
  c->h = h;
  return &c->ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (channel == nullptr) return EINVAL;
  const int rc = to_errno(th::destroy_comp_channel(of<TandemChannel>(channel)->h));
  if (rc == 0) {
    close(channel->fd);
    delete of<TandemChannel>(channel);
  }
  return rc;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector) {
  TandemCq* c = make_cq(context, cqe, cq_context, channel, comp_vector, false);
  return c != nullptr ? &c->cq : nullptr;
}

// ibv_resize_cq: the worker moves the completions not yet polled to a new ring
// (EINVAL if they do not fit in cqe); cq->cqe is the new ring's size.
int ibv_resize_cq(ibv_cq* cq, int cqe) {
  if (cq == nullptr || cqe <= 0 || static_cast<uint32_t>(cqe) > th::kMaxQueueDepth) return errno = EINVAL;
  TandemCq* c = of<TandemCq>(cq);
  const int rc = to_errno(th::resize_cq(c->h, cqe));
  if (rc != 0) return errno = rc;
  cq->cqe = c->h->cqe;
  return 0;
}

int ibv_destroy_cq(ibv_cq* cq) {
  if (cq == nullptr) return EINVAL;
  TandemCq* c = of<TandemCq>(cq);
  const int rc = to_errno(th::destroy_cq(c->h));
  if (rc != 0 && rc != EIO) return rc;
  enlist(cq->context, &TandemContext::cqs, cq->handle, static_cast<ibv_cq*>(nullptr));
  wait_acks(&cq->mutex, &cq->cond, &c->events_delivered, &cq->async_events_completed);
  pthread_mutex_destroy(&cq->mutex);
  pthread_cond_destroy(&cq->cond);
  delete of<TandemCq>(cq);
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  if (channel == nullptr || cq == nullptr || cq_context == nullptr) {
    errno = EINVAL;
    return -1;
  }
  th::Cq* hcq = nullptr;
  void* ours = nullptr;
  // A channel fd the application made nonblocking (UCX does) gets EAGAIN when no event is
  // pending, as libibverbs' read() of it would.
  const bool nonblocking = (fcntl(channel->fd, F_GETFL) & O_NONBLOCK) != 0;
  if (th::get_cq_event(of<TandemChannel>(channel)->h, &hcq, &ours, nonblocking ? 0 : -1) != 0) {
    errno = nonblocking && th::last_status() == th::Status::kTimeout ? EAGAIN : last_errno();
    return -1;
  }
  auto* c = static_cast<TandemCq*>(ours);
  *cq = &c->cq;
  *cq_context = c->cq.cq_context;
  return 0;
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (cq == nullptr) return;
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_mutex_unlock(&cq->mutex);
}

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* a) {
  if (pd == nullptr || a == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  th::Srq* h = th::create_srq(of<TandemPd>(pd)->h, a->attr.max_wr, a->attr.max_sge, a->srq_context,
                              a->attr.srq_limit);
  if (h == nullptr) return null_errno<ibv_srq>();
  a->attr.max_wr = h->max_wr;  // what was granted, as providers report it
  a->attr.max_sge = h->max_sge;
  auto* s = new TandemSrq{};
  s->srq.context = pd->context;
  s->srq.srq_context = a->srq_context;
  s->srq.pd = pd;
  s->srq.handle = h->handle;
  pthread_mutex_init(&s->srq.mutex, nullptr);
  pthread_cond_init(&s->srq.cond, nullptr);
  s->h = h;
  s->limit = a->attr.srq_limit;
  enlist(pd->context, &TandemContext::srqs, s->srq.handle, &s->srq);
  return &s->srq;
}

int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  if (srq == nullptr || attr == nullptr) return EINVAL;
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  if (mask & IBV_SRQ_MAX_WR) return EOPNOTSUPP;  // no resizing (the device does not claim it)
  if (mask & IBV_SRQ_LIMIT) {
    TandemSrq* s = of<TandemSrq>(srq);
    const int rc = to_errno(th::modify_srq(s->h, attr->srq_limit));
    if (rc != 0) return rc;
    pthread_mutex_lock(&srq->mutex);
    s->limit = attr->srq_limit;
    pthread_mutex_unlock(&srq->mutex);
  }
  return 0;
}

int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  if (srq == nullptr || attr == nullptr) return EINVAL;
  TandemSrq* s = of<TandemSrq>(srq);
  attr->max_wr = s->h->max_wr;
  attr->max_sge = s->h->max_sge;
  pthread_mutex_lock(&srq->mutex);
  attr->srq_limit = s->limit;
  pthread_mutex_unlock(&srq->mutex);
  return 0;
}

int ibv_destroy_srq(ibv_srq* srq) {
  if (srq == nullptr) return EINVAL;
  TandemSrq* s = of<TandemSrq>(srq);
  const int rc = to_errno(th::destroy_srq(s->h));
  if (rc != 0 && rc != EIO) return rc;
  enlist(srq->context, &TandemContext::srqs, srq->handle, static_cast<ibv_srq*>(nullptr));
  wait_acks(&srq->mutex, &srq->cond, &s->events_delivered, &srq->events_completed);
  pthread_mutex_destroy(&srq->mutex);
  pthread_cond_destroy(&srq->cond);
  delete of<TandemSrq>(srq);
  return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* a) {
  if (pd == nullptr || a == nullptr || a->send_cq == nullptr || a->recv_cq == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UD) {
    errno = EOPNOTSUPP;  // UC/XRC/raw packet QPs: not built
    return nullptr;
  }
  if (a->srq != nullptr && a->srq->context != pd->context) {
    errno = EINVAL;
    return nullptr;
  }
  th::QpInitAttr hi;
  hi.qp_context = a->qp_context;
  hi.send_cq = of<TandemCq>(a->send_cq)->h;
  hi.recv_cq = of<TandemCq>(a->recv_cq)->h;
  hi.cap = a->cap;
  hi.qp_type = a->qp_type;
  hi.sq_sig_all = a->sq_sig_all;
  hi.srq = a->srq != nullptr ? of<TandemSrq>(a->srq)->h : nullptr;
  th::Qp* h = th::create_qp(of<TandemPd>(pd)->h, &hi);
  if (h == nullptr) return null_errno<ibv_qp>();
  a->cap = hi.cap;  // what was granted
  auto* q = new TandemQp{};
  q->qp.context = pd->context;
  q->qp.qp_context = a->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = a->send_cq;
  q->qp.recv_cq = a->recv_cq;
  q->qp.srq = a->srq;
  q->qp.handle = h->qp_num;
  q->qp.qp_num = h->qp_num;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = a->qp_type;
  pthread_mutex_init(&q->qp.mutex, nullptr);
  pthread_cond_init(&q->qp.cond, nullptr);
  q->h = h;
  q->init = *a;
  enlist(pd->context, &TandemContext::qps, q->qp.qp_num, &q->qp);
  return &q->qp;
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  if (qp == nullptr || attr == nullptr) return EINVAL;
  // One P_Key table entry: the vNIC's tenant's partition, which the worker
  // stamps whatever the application asks (docs/partitions.md).
  if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;
  TandemQp* q = of<TandemQp>(qp);
  const int rc = to_errno(th::modify_qp(q->h, attr, mask));
  if (rc != 0) return rc;
  std::lock_guard g(q->mu);
  // Remember what was set, for ibv_query_qp (the worker keeps no copy to ask).
  ibv_qp_attr& s = q->attr;
  if (mask & IBV_QP_STATE) qp->state = s.qp_state = attr->qp_state;
  if (mask & IBV_QP_ACCESS_FLAGS) s.qp_access_flags = attr->qp_access_flags;
  if (mask & IBV_QP_QKEY) s.qkey = attr->qkey;
  if (mask & IBV_QP_PKEY_INDEX) s.pkey_index = attr->pkey_index;
  if (mask & IBV_QP_PORT) s.port_num = attr->port_num;
  if (mask & IBV_QP_AV) s.ah_attr = attr->ah_attr;
  if (mask & IBV_QP_PATH_MTU) s.path_mtu = attr->path_mtu;
  if (mask & IBV_QP_DEST_QPN) s.dest_qp_num = attr->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) s.rq_psn = attr->rq_psn;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) s.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) s.min_rnr_timer = attr->min_rnr_timer;
  if (mask & IBV_QP_SQ_PSN) s.sq_psn = attr->sq_psn;
  if (mask & IBV_QP_TIMEOUT) s.timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) s.retry_cnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) s.rnr_retry = attr->rnr_retry;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) s.max_rd_atomic = attr->max_rd_atomic;
  return 0;
}

int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init_attr) {
  if (qp == nullptr || attr == nullptr || init_attr == nullptr) return EINVAL;
  TandemQp* q = of<TandemQp>(qp);
  th::query_qp_state(q->h);  // the worker's word: it moves QPs to ERR on its own
  std::lock_guard g(q->mu);
  *attr = q->attr;
  attr->qp_state = attr->cur_qp_state = q->h->state;  // ERR as the worker reported it
  qp->state = q->h->state;
  attr->cap = q->init.cap;
  attr->path_mig_state = IBV_MIG_MIGRATED;
  *init_attr = q->init;
  return 0;
}

int ibv_destroy_qp(ibv_qp* qp) {
  if (qp == nullptr) return EINVAL;
  TandemQp* q = of<TandemQp>(qp);
  const int rc = to_errno(th::destroy_qp(q->h));
  if (rc != 0 && rc != EIO) return rc;
  enlist(qp->context, &TandemContext::qps, qp->qp_num, static_cast<ibv_qp*>(nullptr));
  wait_acks(&qp->mutex, &qp->cond, &q->events_delivered, &qp->events_completed);
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  free_qp_ex(of<TandemQp>(qp));
  delete of<TandemQp>(qp);
  return 0;
}

// The worker's asynchronous events (rnic/host next_async_event), each naming the application's
// object; one for an object destroyed meanwhile is skipped. Blocks on async_fd unless the
// application made it nonblocking (then EAGAIN, as reading the kernel's async fd would).
int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  if (context == nullptr || event == nullptr) {
    errno = EINVAL;
    return -1;
  }
  TandemContext* c = context_of(context);
  for (;;) {
    th::AsyncEvent e;
    while (th::next_async_event(c->host, &e)) {
      std::memset(event, 0, sizeof *event);
      event->event_type = static_cast<ibv_event_type>(e.type);
      switch (event->event_type) {
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_PORT_ERR:
          event->element.port_num = static_cast<int>(e.element);
          return 0;
        case IBV_EVENT_DEVICE_FATAL: {
          // Reported once; the hang-up that woke us must not wake every later wait.
          epoll_ctl(context->async_fd, EPOLL_CTL_DEL, th::control_fd(c->host), nullptr);
          return 0;
        }
        case IBV_EVENT_CQ_ERR: {
          std::lock_guard g(c->objs_mu);
          auto it = c->cqs.find(e.element);
          if (it == c->cqs.end()) continue;
          event->element.cq = it->second;
          pthread_mutex_lock(&it->second->mutex);
          ++of<TandemCq>(it->second)->events_delivered;
          pthread_mutex_unlock(&it->second->mutex);
          return 0;
        }
        case IBV_EVENT_SRQ_LIMIT_REACHED:
        case IBV_EVENT_SRQ_ERR: {
          std::lock_guard g(c->objs_mu);
          auto it = c->srqs.find(e.element);
          if (it == c->srqs.end()) continue;
          event->element.srq = it->second;
          pthread_mutex_lock(&it->second->mutex);
          ++of<TandemSrq>(it->second)->events_delivered;
          if (event->event_type == IBV_EVENT_SRQ_LIMIT_REACHED) of<TandemSrq>(it->second)->limit = 0;  // disarmed
          pthread_mutex_unlock(&it->second->mutex);
          return 0;
        }
        default: {  // the QP events
          std::lock_guard g(c->objs_mu);
          auto it = c->qps.find(e.element);
          if (it == c->qps.end()) continue;
          event->element.qp = it->second;
          pthread_mutex_lock(&it->second->mutex);
          ++of<TandemQp>(it->second)->events_delivered;
          pthread_mutex_unlock(&it->second->mutex);
          return 0;
        }
      }
    }
    if ((fcntl(context->async_fd, F_GETFL) & O_NONBLOCK) != 0) {
      errno = EAGAIN;
      return -1;
    }
    epoll_event ev;
    if (epoll_wait(context->async_fd, &ev, 1, -1) < 0 && errno != EINTR) return -1;
  }
}

// Acknowledges an event: a destroy waiting for it may go on (rdma-core's counters and cond).
void ibv_ack_async_event(ibv_async_event* event) {
  if (event == nullptr) return;
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
      ibv_cq* cq = event->element.cq;
      pthread_mutex_lock(&cq->mutex);
      ++cq->async_events_completed;
      pthread_cond_signal(&cq->cond);
      pthread_mutex_unlock(&cq->mutex);
      return;
    }
    case IBV_EVENT_SRQ_LIMIT_REACHED:
    case IBV_EVENT_SRQ_ERR: {
      ibv_srq* srq = event->element.srq;
      pthread_mutex_lock(&srq->mutex);
      ++srq->events_completed;
      pthread_cond_signal(&srq->cond);
      pthread_mutex_unlock(&srq->mutex);
      return;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
      ibv_qp* qp = event->element.qp;
      pthread_mutex_lock(&qp->mutex);
      ++qp->events_completed;
      pthread_cond_signal(&qp->cond);
      pthread_mutex_unlock(&qp->mutex);
      return;
    }
    default:
      return;  // port and device events hold nothing
  }
}

// As rdma-core: the ibv_qp_ex of a QP made by ibv_create_qp_ex, NULL (errno untouched) otherwise.
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  if (qp == nullptr) return nullptr;
  TandemQp* q = of<TandemQp>(qp);
  return q->batch != nullptr ? &q->qpx : nullptr;
}

}  // extern "C"

namespace {

// The header's ibv_create_cq_ex: the CQ with the ibv_cq_ex poll/read ops; the
// wc_flags must be ones every completion carries (cq.h kCqExFlags), else
// EOPNOTSUPP, as are parent domains and IGNORE_OVERRUN.
ibv_cq_ex* ops_create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* a) {
  if (context == nullptr || a == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if ((a->comp_mask & ~static_cast<uint32_t>(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  // A CQ may name a parent domain (its allocators are not called: see TandemPd); only one.
  if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) != 0 &&
      (a->parent_domain == nullptr || a->parent_domain->context != context ||
       of<TandemPd>(a->parent_domain)->protection == nullptr)) {
    errno = EINVAL;
    return nullptr;
  }
  const uint32_t flags = (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) ? a->flags : 0;
  if ((a->wc_flags & ~kCqExFlags) != 0 ||
      (flags & ~static_cast<uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  TandemCq* c = make_cq(context, static_cast<int>(a->cqe), a->cq_context, a->channel, static_cast<int>(a->comp_vector),
                        (a->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) != 0);
  if (c == nullptr) return nullptr;
  install_cq_ex_ops(c);
  return &c->cqx;
}

// ibv_alloc_parent_domain: a PD over attr->pd (never over another parent
// domain), without a thread domain (ibv_alloc_td is not built).
ibv_pd* ops_alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* a) {
  constexpr uint32_t kKnown = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (context == nullptr || a == nullptr || a->pd == nullptr || a->pd->context != context ||
      of<TandemPd>(a->pd)->protection != nullptr || (a->comp_mask & ~kKnown) != 0 ||
      ((a->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) != 0 && (a->alloc == nullptr || a->free == nullptr))) {
    errno = EINVAL;
    return nullptr;
  }
  if (a->td != nullptr) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  TandemPd* base = of<TandemPd>(a->pd);
  auto* p = new (std::nothrow) TandemPd{};
  if (p == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  p->pd = base->pd;  // context and handle: the protection domain's
  p->h = base->h;
  p->protection = base;
  p->parent = *a;
  base->parents.fetch_add(1, std::memory_order_relaxed);
  return &p->pd;
}

// ibv_query_device_ex: the legacy attributes and what the extended ones say of
// Tandem (no ODP, TSO, RSS, tag matching or device memory; one port;
// completion timestamps in ns of the worker's clock).
int ops_query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                        size_t attr_size) {
  if (context == nullptr || attr == nullptr || (input != nullptr && input->comp_mask != 0)) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex full{};
  if (int rc = ibv_query_device(context, &full.orig_attr); rc != 0) return rc;
  full.completion_timestamp_mask = ~uint64_t{0};
  full.hca_core_clock = kCoreClockKhz;
  full.device_cap_flags_ex = full.orig_attr.device_cap_flags;
  full.phys_port_cnt_ex = full.orig_attr.phys_port_cnt;
  std::memcpy(attr, &full, std::min(attr_size, sizeof full));
  if (attr_size > sizeof full) std::memset(reinterpret_cast<uint8_t*>(attr) + sizeof full, 0, attr_size - sizeof full);
  return 0;
}

// The worker's clock now (what completion timestamps count), read from the
// TSC as the worker reads it (WorkerPage); EOPNOTSUPP where it cannot be.
int ops_query_rt_values(ibv_context* context, ibv_values_ex* values) {
  if (context == nullptr || values == nullptr) return EINVAL;
  if ((values->comp_mask & ~static_cast<uint32_t>(IBV_VALUES_MASK_RAW_CLOCK)) != 0) return EINVAL;
  uint64_t ns = 0;
  if (!th::device_clock_ns(context_of(context)->host, &ns)) return EOPNOTSUPP;
  values->raw_clock.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  values->raw_clock.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  values->comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  return 0;
}

// The header's ibv_create_qp_ex lands here for any comp_mask but PD alone (which it sends to
// ibv_create_qp). RC QPs with a PD, optionally with the send ops Tandem executes.
ibv_qp* ops_create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* a) {
  if (context == nullptr || a == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  constexpr uint32_t kKnown = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  if ((a->comp_mask & ~kKnown) != 0 ||  // XRC domains, TSO, RSS: not built
      ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 && a->create_flags != 0) ||
      ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0 && (a->send_ops_flags & ~kSendOpsSupported) != 0)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if ((a->comp_mask & IBV_QP_INIT_ATTR_PD) == 0 || a->pd == nullptr || a->pd->context != context) {
    errno = EINVAL;
    return nullptr;
  }
  if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UD) {
    errno = EOPNOTSUPP;  // UC, XRC, raw packet: not built
    return nullptr;
  }
  // A UD QP sends datagrams: only SEND and SEND_WITH_IMM (as ibv_post_send refuses the rest).
  if (a->qp_type == IBV_QPT_UD && (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0 &&
      (a->send_ops_flags & ~static_cast<uint64_t>(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM)) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  ibv_qp_init_attr legacy{};
  legacy.qp_context = a->qp_context;
  legacy.send_cq = a->send_cq;
  legacy.recv_cq = a->recv_cq;
  legacy.srq = a->srq;
  legacy.cap = a->cap;
  legacy.qp_type = a->qp_type;
  legacy.sq_sig_all = a->sq_sig_all;
  ibv_qp* qp = ibv_create_qp(a->pd, &legacy);  // errno set on failure
  if (qp == nullptr) return nullptr;
  a->cap = legacy.cap;  // what was granted
  if (!make_qp_ex(of<TandemQp>(qp))) {
    ibv_destroy_qp(qp);
    errno = ENOMEM;
    return nullptr;
  }
  return qp;
}

}  // namespace
