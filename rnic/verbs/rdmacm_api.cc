// The drop-in librdmacm's API (rdma-core v44's, <rdma/rdma_cma.h>): IDs,
// addresses, connections and QPs over the worker's connection manager
// (rnic/cm), events through the channel's fd. As in rdma-core, the library
// moves an ID's QP through INIT, RTR and RTS with what the CM exchange gave.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "rnic/verbs/rdmacm_core.h"
#include "rnic/verbs/rdmacm_qp_attr.h"
#include <rdma/rdma_verbs.h>

using namespace tandem::rnic;
using namespace tandem::rnic::rdmacm;

namespace {

constexpr uint32_t kUdpQkey = 0x01234567;  // RDMA_UDP_QKEY

std::atomic<uint32_t> g_channel_no{1};

Id* id_of(rdma_cm_id* p) { return reinterpret_cast<Id*>(p); }
Channel* channel_of(rdma_event_channel* p) { return reinterpret_cast<Channel*>(p); }

int fail(int e) {
  errno = e;
  return -1;
}

uint32_t ip_of(const sockaddr* a) {
  if (a == nullptr || a->sa_family != AF_INET) return 0;
  return ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr);
}
uint16_t port_of(const sockaddr* a) {
  if (a == nullptr || a->sa_family != AF_INET) return 0;
  return ntohs(reinterpret_cast<const sockaddr_in*>(a)->sin_port);
}
// An application's address as the IPv4 one vNICs have: AF_INET as is, and AF_INET6 when it is
// IPv4-mapped (::ffff:a.b.c.d) or the wildcard (::). getaddrinfo without hints gives the mapped
// form wherever the host has IPv6 but no IPv4 address (AI_ADDRCONFIG): rping in a namespace
// whose only interface is a tap. false: a real IPv6 address (EAFNOSUPPORT).
bool to_v4(const sockaddr* a, sockaddr_in* out) {
  if (a == nullptr) return false;
  if (a->sa_family == AF_INET) {
    std::memcpy(out, a, sizeof *out);
    return true;
  }
  if (a->sa_family != AF_INET6) return false;
  const auto* s6 = reinterpret_cast<const sockaddr_in6*>(a);
  if (!IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && !IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr)) return false;
  std::memset(out, 0, sizeof *out);
  out->sin_family = AF_INET;
  out->sin_port = s6->sin6_port;
  if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) std::memcpy(&out->sin_addr, s6->sin6_addr.s6_addr + 12, 4);
  return true;
}
void set_sin(sockaddr_in* s, uint32_t ip, uint16_t port) {
  s->sin_family = AF_INET;
  s->sin_addr.s_addr = htonl(ip);
  s->sin_port = htons(port);
}
void gid_of(uint32_t ip, ibv_gid* g) {
  std::memset(g, 0, sizeof *g);
  g->raw[10] = g->raw[11] = 0xff;
  const uint32_t be = htonl(ip);
  std::memcpy(g->raw + 12, &be, 4);
}

uint32_t random_psn() {  // never 0: 0 means "not chosen yet"
  static thread_local std::mt19937 rng(std::random_device{}());
  uint32_t p = 0;
  while (p == 0) p = rng() & 0xFFFFFF;
  return p;
}

Channel* new_channel() {
  auto* ch = new Channel();
  ch->no = g_channel_no.fetch_add(1);
  ch->pub.fd = epoll_create1(EPOLL_CLOEXEC);
  ch->local = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
  if (ch->pub.fd < 0 || ch->local < 0) {
    if (ch->pub.fd >= 0) close(ch->pub.fd);
    if (ch->local >= 0) close(ch->local);
    delete ch;
    return nullptr;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  epoll_ctl(ch->pub.fd, EPOLL_CTL_ADD, ch->local, &ev);
  return ch;
}

void free_channel(Channel* ch) {
  for (auto& [w, fd] : ch->conns) close(fd);
  for (rdma_cm_event* e : ch->queue) delete reinterpret_cast<Event*>(e);
  close(ch->local);
  close(ch->pub.fd);
  delete ch;
}

Event* make_event(Id* id, rdma_cm_event_type type, int status) {
  auto* e = new Event();
  e->pub.id = &id->pub;
  e->pub.event = type;
  e->pub.status = status;
  return e;
}

void fill_path(Id* id) {
  ibv_sa_path_rec& p = id->path;
  std::memset(&p, 0, sizeof p);
  gid_of(ip_of(&id->pub.route.addr.src_addr), &p.sgid);
  gid_of(ip_of(&id->pub.route.addr.dst_addr), &p.dgid);
  p.hop_limit = 64;
  p.pkey = 0xFFFF;
  p.mtu = static_cast<uint8_t>(id->worker ? id->worker->mtu : uint8_t{IBV_MTU_1024});
  p.reversible = 1;
  p.numb_path = 1;
  id->pub.route.path_rec = &p;
  id->pub.route.num_paths = 1;
}

int qp_modify(Id* id, ibv_qp_attr* a, int mask) {
  const int rc = ibv_modify_qp(id->pub.qp, a, mask);
  if (rc != 0) return fail(rc > 0 ? rc : errno);
  return 0;
}

int qp_init(Id* id) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  if (id->pub.qp->qp_type == IBV_QPT_UD) {
    a.qkey = kUdpQkey;
    if (qp_modify(id, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return -1;
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTR;
    if (qp_modify(id, &r, IBV_QP_STATE)) return -1;
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_RTS;
    s.sq_psn = random_psn();
    return qp_modify(id, &s, IBV_QP_STATE | IBV_QP_SQ_PSN);
  }
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  return qp_modify(id, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

ConnQp conn_qp(const Id* id) {
  ConnQp c;
  c.announced_psn = id->psn;
  c.remote = id->remote;
  c.remote_ip = ip_of(&id->pub.route.addr.dst_addr);
  c.ack_timeout = id->ack_timeout;
  return c;
}

// The QP's RTR and RTS with the peer's QPN and the PSNs of rdma_cm's rule
// (rdmacm_qp_attr.h), as rdma-core's ucma_modify_qp_rtr/_rts do with the
// kernel's rdma_init_qp_attr.
int qp_connect(Id* id, uint8_t resp_res, uint8_t init_depth, uint8_t retry, uint8_t rnr) {
  ConnQp c = conn_qp(id);
  c.responder_resources = resp_res;
  c.initiator_depth = init_depth;
  c.retry_count = retry;
  c.rnr_retry_count = rnr;
  ibv_qp_attr a;
  int mask = 0;
  conn_rtr_attr(c, &a, &mask);
  if (qp_modify(id, &a, mask)) return -1;
  conn_rts_attr(c, &a, &mask);
  return qp_modify(id, &a, mask);
}

void qp_error(Id* id) {
  if (id->pub.qp == nullptr) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(id->pub.qp, &a, IBV_QP_STATE);
}

void set_conn_param(Event* e, const cm::CmEventMsg& m) {
  rdma_conn_param& c = e->pub.param.conn;
  std::memcpy(e->priv, m.private_data, std::min<uint32_t>(m.private_len, sizeof e->priv));
  c.private_data = m.private_len ? e->priv : nullptr;
  c.private_data_len = static_cast<uint8_t>(std::min<uint32_t>(m.private_len, 255));
  c.responder_resources = m.params.responder_resources;
  c.initiator_depth = m.params.initiator_depth;
  c.flow_control = m.params.flow_control;
  c.retry_count = m.params.retry_count;
  c.rnr_retry_count = m.params.rnr_retry_count;
  c.srq = m.params.srq;
  c.qp_num = m.params.qpn;
}

// An ID on a device gets the device's PD (one per device and process, as
// rdma-core's librdmacm): applications build their own QPs, MRs and AHs on id->pd.
int bind_device(Id* id, Device* d) {
  if (open_ctx(*d) == nullptr) return -1;
  if (d->pd == nullptr) d->pd = ibv_alloc_pd(d->ctx);
  if (d->pd == nullptr) return -1;
  id->pub.pd = d->pd;
  id->device = d;
  id->worker = d->worker;
  id->pub.verbs = d->ctx;
  id->pub.port_num = 1;
  return 0;
}

// An event from the worker, made into the application's (nullptr: handled here).
rdma_cm_event* translate(Channel& ch, Worker* w, const cm::CmEventMsg& m) {
  Id* id = m.cookie ? id_by_cookie(m.cookie) : nullptr;
  if (id == nullptr && m.id) id = id_by_wid(w, m.id);
  if (id == nullptr) return nullptr;  // destroyed meanwhile
  const auto type = static_cast<rdma_cm_event_type>(m.event);
  switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: {
      Device* d = device_by_ip(m.local_ip);
      if (d == nullptr || d->worker != w || bind_device(id, d) != 0) return &make_event(id, RDMA_CM_EVENT_ADDR_ERROR, -ENODEV)->pub;
      set_sin(&id->pub.route.addr.src_sin, m.local_ip, port_of(&id->pub.route.addr.src_addr));
      w->mtu = m.params.path_mtu ? m.params.path_mtu : w->mtu;
      return &make_event(id, type, 0)->pub;
    }
    case RDMA_CM_EVENT_ADDR_ERROR: {
      // Unbound: the next worker may have a route.
      if (id->device == nullptr) {
        const std::vector<Worker*> ws = workers();
        while (++id->resolve_try < ws.size()) {
          cm::CmRequest r;
          r.op = static_cast<uint16_t>(cm::CmOp::kResolve);
          r.cookie = id->cookie;
          r.channel = ch.no;
          r.remote_ip = m.remote_ip;
          cm::CmReply rep;
          if (channel_attach(ch, *ws[id->resolve_try]) && command(*ws[id->resolve_try], r, &rep) == 0) return nullptr;
        }
      }
      return &make_event(id, type, m.status)->pub;
    }
    case RDMA_CM_EVENT_CONNECT_REQUEST: {
      auto* n = new Id();
      n->pub.context = id->pub.context;
      n->pub.ps = id->pub.ps;
      n->pub.qp_type = id->pub.qp_type;
      n->channel = id->channel;
      n->pub.channel = id->pub.channel;
      Device* d = device_by_ip(m.local_ip);
      if (d == nullptr || bind_device(n, d) != 0) {
        delete n;
        return nullptr;
      }
      n->wid = m.id;
      n->cookie = new_cookie(n);
      index_wid(n);
      set_sin(&n->pub.route.addr.src_sin, m.local_ip, m.local_port);
      set_sin(&n->pub.route.addr.dst_sin, m.remote_ip, m.remote_port);
      n->remote = m.params;
      fill_path(n);
      Event* e = make_event(n, type, 0);
      e->pub.listen_id = &id->pub;
      if (n->pub.qp_type == IBV_QPT_UD) {
        std::memcpy(e->priv, m.private_data, std::min<uint32_t>(m.private_len, sizeof e->priv));
        e->pub.param.ud.private_data = m.private_len ? e->priv : nullptr;
        e->pub.param.ud.private_data_len = static_cast<uint8_t>(std::min<uint32_t>(m.private_len, 255));
      } else {
        set_conn_param(e, m);
      }
      return &e->pub;
    }
    case RDMA_CM_EVENT_CONNECT_RESPONSE: {
      id->remote = m.params;
      if (id->pub.qp == nullptr) {  // the application moves its QP and calls rdma_establish
        Event* e = make_event(id, type, 0);
        set_conn_param(e, m);
        return &e->pub;
      }
      cm::CmRequest r;
      cm::CmReply rep;
      r.id = id->wid;
      if (qp_connect(id, id->local.responder_resources, id->local.initiator_depth, id->local.retry_count,
                     id->local.rnr_retry_count) != 0) {
        r.op = static_cast<uint16_t>(cm::CmOp::kReject);
        command(*w, r, &rep);
        return &make_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -errno)->pub;
      }
      r.op = static_cast<uint16_t>(cm::CmOp::kEstablish);
      if (command(*w, r, &rep) != 0) return &make_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -errno)->pub;
      return nullptr;  // ESTABLISHED follows from the worker
    }
    case RDMA_CM_EVENT_ESTABLISHED: {
      // After rdma_establish the application has its answer: the kernel's rdma_cm
      // sends the RTU and reports nothing more (the next event is DISCONNECTED).
      if (id->app_established && id->pub.qp_type != IBV_QPT_UD) return nullptr;
      Event* e = make_event(id, type, 0);
      if (id->pub.qp_type == IBV_QPT_UD) {
        rdma_ud_param& u = e->pub.param.ud;
        std::memcpy(e->priv, m.private_data, std::min<uint32_t>(m.private_len, sizeof e->priv));
        u.private_data = m.private_len ? e->priv : nullptr;
        u.private_data_len = static_cast<uint8_t>(std::min<uint32_t>(m.private_len, 255));
        u.ah_attr.is_global = 1;
        gid_of(m.remote_ip ? m.remote_ip : ip_of(&id->pub.route.addr.dst_addr), &u.ah_attr.grh.dgid);
        u.ah_attr.grh.hop_limit = 64;
        u.ah_attr.port_num = 1;
        u.qp_num = m.params.qpn;
        u.qkey = m.params.qkey;
      } else {
        set_conn_param(e, m);
      }
      return &e->pub;
    }
    case RDMA_CM_EVENT_DISCONNECTED:
      // The peer's DREQ (or its answer) moves the QP to ERR, as rdma-core does, unless the
      // application disconnected first: rdma_disconnect did it, and rping then destroys the
      // QP with ibv_destroy_qp while this event is on its way (touching it was a use after free).
      if (!id->app_disconnected) qp_error(id);
      [[fallthrough]];
    default: {
      Event* e = make_event(id, type, m.status);
      set_conn_param(e, m);
      return &e->pub;
    }
  }
}

// Waits for (or, non-blocking, looks for) the channel's next event.
int next_event(Channel* ch, rdma_cm_event** out, int timeout_ms) {
  struct Waiting {
    Channel* ch;
    explicit Waiting(Channel* c) : ch(c) { ch->waiters.fetch_add(1); }
    ~Waiting() { ch->waiters.fetch_sub(1); }
  } waiting(ch);
  for (;;) {
    while (ch->dead.load()) pause();  // destroyed while this thread waited: it waits for ever
    {
      std::lock_guard<std::mutex> g(ch->mu);
      if (!ch->queue.empty()) {
        *out = ch->queue.front();
        ch->queue.pop_front();
        uint64_t v;
        (void)!read(ch->local, &v, sizeof v);
        return 0;
      }
    }
    const bool nonblocking = (fcntl(ch->pub.fd, F_GETFL) & O_NONBLOCK) != 0;
    epoll_event evs[8];
    const int n = epoll_wait(ch->pub.fd, evs, 8, nonblocking ? 0 : timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return fail(nonblocking ? EAGAIN : ETIMEDOUT);
    for (int i = 0; i < n; ++i) {
      auto* w = static_cast<Worker*>(evs[i].data.ptr);
      if (w == nullptr) continue;  // a local event: the queue
      int fd;
      {
        std::lock_guard<std::mutex> g(ch->mu);
        const auto it = ch->conns.find(w);
        if (it == ch->conns.end()) continue;
        fd = it->second;
      }
      cm::CmEventMsg m;
      const ssize_t got = recv(fd, &m, sizeof m, MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (got != static_cast<ssize_t>(sizeof m) || m.magic != cm::kCmMagic) {  // the worker died
        std::lock_guard<std::mutex> g(ch->mu);
        epoll_ctl(ch->pub.fd, EPOLL_CTL_DEL, fd, nullptr);
        close(fd);
        ch->conns.erase(w);
        continue;
      }
      if (rdma_cm_event* e = translate(*ch, w, m)) {
        *out = e;
        return 0;
      }
    }
  }
}

// Synchronous IDs (created without a channel): wait for the event the call started.
int sync_wait(Id* id, rdma_cm_event_type want) {
  if (!id->own_channel) return 0;
  if (id->sync_event) {
    rdma_ack_cm_event(id->sync_event);
    id->sync_event = nullptr;
  }
  rdma_cm_event* e = nullptr;
  for (;;) {
    if (next_event(id->channel, &e, -1) != 0) return -1;
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {  // a synchronous listener's: rdma_get_request takes it
      Id* l = id_of(e->listen_id);
      l->requests.push_back(e);
      if (l == id && want == RDMA_CM_EVENT_CONNECT_REQUEST) return 0;
      continue;
    }
    break;
  }
  id->sync_event = e;
  id->pub.event = e;
  if (e->status != 0 || e->event != want) {
    const int st = e->status;
    return fail(e->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : (st < 0 ? -st : EIO));
  }
  return 0;
}

}  // namespace

void tandem_rdmacm_keep_ep_qp(rdma_cm_id* pub, ibv_pd* pd, const ibv_qp_init_attr* attr) {
  Id* id = id_of(pub);
  id->has_ep_qp = true;
  id->ep_qp = *attr;
  id->ep_pd = pd;
}

extern "C" {

rdma_event_channel* rdma_create_event_channel(void) {
  Channel* ch = new_channel();
  if (ch == nullptr) return nullptr;
  return &ch->pub;
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel == nullptr) return;
  Channel* ch = channel_of(channel);
  ch->dead.store(true);
  if (ch->waiters.load() == 0) {
    free_channel(ch);
    return;
  }
  // A thread still waits in rdma_get_cm_event: the channel and its fds stay
  // (never freed under it), and it waits on for ever, as a read() on
  // rdma-core's closed channel fd does (rping's CM thread exits the process
  // on an error, which would race its main thread's exit status).
}

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** out, void* context, rdma_port_space ps) {
  if (out == nullptr) return fail(EINVAL);
  if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB && ps != RDMA_PS_IPOIB) return fail(EINVAL);
  devices();
  auto* id = new Id();
  if (channel == nullptr) {
    Channel* ch = new_channel();
    if (ch == nullptr) {
      delete id;
      return -1;
    }
    id->own_channel = true;
    channel = &ch->pub;
  }
  id->channel = channel_of(channel);
  id->pub.channel = channel;
  id->pub.context = context;
  id->pub.ps = ps;
  id->pub.qp_type = (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) ? IBV_QPT_UD : IBV_QPT_RC;
  id->cookie = new_cookie(id);
  *out = &id->pub;
  return 0;
}

int rdma_destroy_id(rdma_cm_id* pub) {
  if (pub == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  cm::CmRequest r;
  cm::CmReply rep;
  r.op = static_cast<uint16_t>(cm::CmOp::kDestroy);
  for (auto& [w, wid] : id->listens) {
    r.id = wid;
    command(*w, r, &rep);
  }
  if (id->worker && id->wid) {
    r.id = id->wid;
    command(*id->worker, r, &rep);
  }
  unindex(id);
  if (id->sync_event) rdma_ack_cm_event(id->sync_event);
  for (rdma_cm_event* e : id->requests) rdma_ack_cm_event(e);
  if (id->own_channel) free_channel(id->channel);
  delete id;
  return 0;
}

int rdma_bind_addr(rdma_cm_id* pub, sockaddr* addr6) {
  Id* id = id_of(pub);
  if (addr6 == nullptr) return fail(EINVAL);
  sockaddr_in sin;
  if (!to_v4(addr6, &sin)) return fail(EAFNOSUPPORT);  // vNIC addresses are IPv4
  const sockaddr* addr = reinterpret_cast<const sockaddr*>(&sin);
  const uint32_t ip = ip_of(addr);
  if (ip != 0) {
    Device* d = device_by_ip(ip);
    if (d == nullptr) return fail(EADDRNOTAVAIL);
    if (bind_device(id, d) != 0) return -1;
  }
  set_sin(&id->pub.route.addr.src_sin, ip, port_of(addr));
  return 0;
}

int rdma_resolve_addr(rdma_cm_id* pub, sockaddr* src6, sockaddr* dst6, int timeout_ms) {
  (void)timeout_ms;
  Id* id = id_of(pub);
  if (dst6 == nullptr) return fail(EINVAL);
  sockaddr_in dsin, ssin;
  if (!to_v4(dst6, &dsin) || (src6 != nullptr && !to_v4(src6, &ssin))) return fail(EAFNOSUPPORT);
  sockaddr* dst = reinterpret_cast<sockaddr*>(&dsin);
  sockaddr* src = src6 ? reinterpret_cast<sockaddr*>(&ssin) : nullptr;
  if (src != nullptr && ip_of(src) != 0 && rdma_bind_addr(pub, src) != 0) return -1;
  std::memcpy(&id->pub.route.addr.dst_sin, dst, sizeof(sockaddr_in));
  const std::vector<Worker*> ws = workers();
  if (ws.empty()) return fail(ENODEV);
  Worker* w = id->worker ? id->worker : ws[0];
  id->resolve_try = 0;
  for (std::size_t i = 0; i < ws.size(); ++i)
    if (ws[i] == w) id->resolve_try = i;
  if (!channel_attach(*id->channel, *w)) return -1;
  cm::CmRequest r;
  r.op = static_cast<uint16_t>(cm::CmOp::kResolve);
  r.cookie = id->cookie;
  r.channel = id->channel->no;
  r.local_ip = id->device ? id->device->ip : 0;
  r.remote_ip = ip_of(dst);
  cm::CmReply rep;
  if (command(*w, r, &rep) != 0) return -1;
  return sync_wait(id, RDMA_CM_EVENT_ADDR_RESOLVED);
}

int rdma_resolve_route(rdma_cm_id* pub, int timeout_ms) {
  (void)timeout_ms;
  Id* id = id_of(pub);
  if (id->device == nullptr) return fail(EINVAL);
  // RoCE: no SA to ask; the path is the vNIC's route, checked at resolve_addr.
  fill_path(id);
  post_local(*id->channel, &make_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0)->pub);
  return sync_wait(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

int rdma_listen(rdma_cm_id* pub, int backlog) {
  (void)backlog;
  Id* id = id_of(pub);
  std::vector<Worker*> ws;
  if (id->worker) ws.push_back(id->worker);
  else ws = workers();
  if (ws.empty()) return fail(ENODEV);
  uint16_t port = port_of(&id->pub.route.addr.src_addr);
  for (Worker* w : ws) {
    if (!channel_attach(*id->channel, *w)) return -1;
    cm::CmRequest r;
    r.op = static_cast<uint16_t>(cm::CmOp::kListen);
    r.cookie = id->cookie;
    r.channel = id->channel->no;
    r.local_ip = id->device ? id->device->ip : 0;
    r.local_port = port;
    r.ps = static_cast<uint16_t>(id->pub.ps);
    r.qp_type = static_cast<uint16_t>(id->pub.qp_type);
    cm::CmReply rep;
    if (command(*w, r, &rep) != 0) return -1;
    port = rep.port;  // the same port on every worker
    id->listens.emplace_back(w, rep.id);
  }
  set_sin(&id->pub.route.addr.src_sin, ip_of(&id->pub.route.addr.src_addr), port);
  return 0;
}

int rdma_connect(rdma_cm_id* pub, rdma_conn_param* param) {
  Id* id = id_of(pub);
  if (id->worker == nullptr || id->device == nullptr) return fail(EINVAL);
  if (param && param->private_data_len > cm::kCmPrivateMax) return fail(EINVAL);
  if (param) id->local = *param;
  else {
    id->local = rdma_conn_param{};
    id->local.retry_count = 7;
    id->local.rnr_retry_count = 7;
  }
  id->local.responder_resources = std::min<uint8_t>(id->local.responder_resources, 16);
  id->local.initiator_depth = std::min<uint8_t>(id->local.initiator_depth, 16);
  id->psn = random_psn();
  cm::CmRequest r;
  r.op = static_cast<uint16_t>(cm::CmOp::kConnect);
  r.cookie = id->cookie;
  r.channel = id->channel->no;
  r.local_ip = id->device->ip;
  r.remote_ip = ip_of(&id->pub.route.addr.dst_addr);
  r.local_port = port_of(&id->pub.route.addr.src_addr);
  r.remote_port = port_of(&id->pub.route.addr.dst_addr);
  r.ps = static_cast<uint16_t>(id->pub.ps);
  r.qp_type = static_cast<uint16_t>(id->pub.qp_type);
  r.params.qpn = id->pub.qp ? id->pub.qp->qp_num : (param ? param->qp_num : 0);
  r.params.psn = id->psn;
  r.params.responder_resources = id->local.responder_resources;
  r.params.initiator_depth = id->local.initiator_depth;
  r.params.flow_control = id->local.flow_control;
  r.params.retry_count = std::min<uint8_t>(id->local.retry_count, 7);
  r.params.rnr_retry_count = std::min<uint8_t>(id->local.rnr_retry_count, 7);
  r.params.srq = id->pub.srq ? 1 : id->local.srq;
  if (param && param->private_data_len) {
    r.private_len = param->private_data_len;
    std::memcpy(r.private_data, param->private_data, param->private_data_len);
  }
  if (!channel_attach(*id->channel, *id->worker)) return -1;
  cm::CmReply rep;
  if (command(*id->worker, r, &rep) != 0) return -1;
  id->wid = rep.id;
  index_wid(id);
  set_sin(&id->pub.route.addr.src_sin, id->device->ip, rep.port);
  return sync_wait(id, RDMA_CM_EVENT_ESTABLISHED);
}

int rdma_accept(rdma_cm_id* pub, rdma_conn_param* param) {
  Id* id = id_of(pub);
  if (id->worker == nullptr || id->wid == 0) return fail(EINVAL);
  if (param && param->private_data_len > cm::kCmPrivateMax) return fail(EINVAL);
  rdma_conn_param p{};
  if (param) p = *param;
  else {
    p.responder_resources = id->remote.responder_resources;
    p.initiator_depth = id->remote.initiator_depth;
    p.rnr_retry_count = 7;
  }
  p.responder_resources = std::min<uint8_t>(p.responder_resources, 16);
  p.initiator_depth = std::min<uint8_t>(p.initiator_depth, 16);
  id->local = p;
  if (id->psn == 0) id->psn = random_psn();  // rdma_init_qp_attr may have given it to the QP already
  cm::CmRequest r;
  r.op = static_cast<uint16_t>(cm::CmOp::kAccept);
  r.id = id->wid;
  r.cookie = id->cookie;
  if (id->pub.qp_type == IBV_QPT_UD) {
    r.params.qpn = id->pub.qp ? id->pub.qp->qp_num : p.qp_num;
    r.params.qkey = kUdpQkey;
  } else {
    if (id->pub.qp && qp_connect(id, p.responder_resources, p.initiator_depth, id->remote.retry_count,
                                 p.rnr_retry_count) != 0) {
      const int e = errno;
      rdma_reject(pub, nullptr, 0);
      return fail(e);
    }
    r.params.qpn = id->pub.qp ? id->pub.qp->qp_num : p.qp_num;
    r.params.psn = id->psn;
    r.params.responder_resources = p.responder_resources;
    r.params.initiator_depth = p.initiator_depth;
    r.params.flow_control = p.flow_control;
    r.params.rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
    r.params.srq = id->pub.srq ? 1 : p.srq;
  }
  if (param && param->private_data_len) {
    r.private_len = param->private_data_len;
    std::memcpy(r.private_data, param->private_data, param->private_data_len);
  }
  cm::CmReply rep;
  if (command(*id->worker, r, &rep) != 0) return -1;
  if (id->pub.qp_type == IBV_QPT_UD) return 0;
  return sync_wait(id, RDMA_CM_EVENT_ESTABLISHED);
}

int rdma_reject(rdma_cm_id* pub, const void* private_data, uint8_t private_data_len) {
  Id* id = id_of(pub);
  if (id->worker == nullptr || id->wid == 0) return fail(EINVAL);
  cm::CmRequest r;
  r.op = static_cast<uint16_t>(cm::CmOp::kReject);
  r.id = id->wid;
  r.cookie = id->cookie;
  if (private_data && private_data_len) {
    r.private_len = private_data_len;
    std::memcpy(r.private_data, private_data, std::min<uint32_t>(private_data_len, cm::kCmPrivateMax));
  }
  cm::CmReply rep;
  return command(*id->worker, r, &rep);
}

// The active side of an application-moved QP (no id->qp, as rdma-core requires)
// after CONNECT_RESPONSE: the RTU goes out; no ESTABLISHED event follows.
int rdma_establish(rdma_cm_id* pub) {
  Id* id = id_of(pub);
  if (id->worker == nullptr || id->wid == 0 || pub->qp != nullptr) return fail(EINVAL);
  id->app_established = true;
  cm::CmRequest r;
  r.op = static_cast<uint16_t>(cm::CmOp::kEstablish);
  r.id = id->wid;
  cm::CmReply rep;
  return command(*id->worker, r, &rep);
}

int rdma_disconnect(rdma_cm_id* pub) {
  Id* id = id_of(pub);
  if (id->worker == nullptr || id->wid == 0) return fail(EINVAL);
  qp_error(id);  // as rdma-core: the QP flushes; the peer hears DREQ
  id->app_disconnected = true;
  cm::CmRequest r;
  r.op = static_cast<uint16_t>(cm::CmOp::kDisconnect);
  r.id = id->wid;
  cm::CmReply rep;
  return command(*id->worker, r, &rep);
}

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (channel == nullptr || event == nullptr) return fail(EINVAL);
  return next_event(channel_of(channel), event, -1);
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  if (event == nullptr) return fail(EINVAL);
  delete reinterpret_cast<Event*>(event);
  return 0;
}

int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  Id* l = id_of(listen);
  if (l->requests.empty() && sync_wait(l, RDMA_CM_EVENT_CONNECT_REQUEST) != 0) return -1;
  if (l->requests.empty()) return fail(EAGAIN);
  rdma_cm_event* e = l->requests.front();
  l->requests.pop_front();
  Id* n = id_of(e->id);
  n->sync_event = e;  // acked with the new ID, as rdma-core keeps it in id->event
  n->pub.event = e;
  n->own_channel = false;
  if (l->has_ep_qp) {  // rdma_create_ep's QP attributes: the new ID gets its QP, as rdma-core does
    ibv_qp_init_attr a = l->ep_qp;
    if (rdma_create_qp(e->id, l->ep_pd, &a) != 0) {
      const int err = errno;
      rdma_reject(e->id, nullptr, 0);
      rdma_destroy_id(e->id);
      return fail(err);
    }
  }
  *id = e->id;
  return 0;
}

int rdma_create_qp(rdma_cm_id* pub, ibv_pd* pd, ibv_qp_init_attr* attr) {
  Id* id = id_of(pub);
  if (id->device == nullptr || attr == nullptr) return fail(EINVAL);
  if (pd == nullptr) {
    if (id->device->pd == nullptr) id->device->pd = ibv_alloc_pd(id->device->ctx);
    pd = id->device->pd;
    if (pd == nullptr) return -1;
  }
  if (pd->context != id->pub.verbs) return fail(EINVAL);
  ibv_qp_init_attr a = *attr;
  if (a.send_cq == nullptr || a.recv_cq == nullptr) {  // rdma-core makes them, with channels
    id->pub.send_cq_channel = ibv_create_comp_channel(id->pub.verbs);
    id->pub.recv_cq_channel = id->pub.send_cq_channel;
    const int depth = static_cast<int>(std::max<uint32_t>(a.cap.max_send_wr + a.cap.max_recv_wr, 16));
    id->pub.send_cq = ibv_create_cq(id->pub.verbs, depth, nullptr, id->pub.send_cq_channel, 0);
    id->pub.recv_cq = id->pub.send_cq;
    if (id->pub.send_cq == nullptr) return -1;
    a.send_cq = a.send_cq ? a.send_cq : id->pub.send_cq;
    a.recv_cq = a.recv_cq ? a.recv_cq : id->pub.recv_cq;
    id->own_cqs = true;
  }
  if (a.srq == nullptr) a.srq = id->pub.srq;
  ibv_qp* qp = ibv_create_qp(pd, &a);
  if (qp == nullptr) return -1;
  id->pub.qp = qp;
  if (qp_init(id) != 0) {
    const int e = errno;
    ibv_destroy_qp(qp);
    id->pub.qp = nullptr;
    return fail(e);
  }
  attr->cap = a.cap;
  if (attr->send_cq == nullptr) attr->send_cq = a.send_cq;
  if (attr->recv_cq == nullptr) attr->recv_cq = a.recv_cq;
  id->pub.pd = pd;
  return 0;
}

int rdma_create_qp_ex(rdma_cm_id* pub, ibv_qp_init_attr_ex* attr) {
  if (attr == nullptr) return fail(EINVAL);
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD)) return fail(EINVAL);
  ibv_qp_init_attr a{};
  a.qp_context = attr->qp_context;
  a.send_cq = attr->send_cq;
  a.recv_cq = attr->recv_cq;
  a.srq = attr->srq;
  a.cap = attr->cap;
  a.qp_type = attr->qp_type;
  a.sq_sig_all = attr->sq_sig_all;
  const int rc = rdma_create_qp(pub, attr->pd, &a);
  if (rc == 0) attr->cap = a.cap;
  return rc;
}

void rdma_destroy_qp(rdma_cm_id* pub) {
  Id* id = id_of(pub);
  if (id->pub.qp) ibv_destroy_qp(id->pub.qp);
  id->pub.qp = nullptr;
  if (id->own_cqs) {
    if (id->pub.send_cq) ibv_destroy_cq(id->pub.send_cq);
    if (id->pub.send_cq_channel) ibv_destroy_comp_channel(id->pub.send_cq_channel);
    id->pub.send_cq = id->pub.recv_cq = nullptr;
    id->pub.send_cq_channel = id->pub.recv_cq_channel = nullptr;
    id->own_cqs = false;
  }
}

int rdma_create_srq(rdma_cm_id* pub, ibv_pd* pd, ibv_srq_init_attr* attr) {
  Id* id = id_of(pub);
  if (id->device == nullptr) return fail(EINVAL);
  if (pd == nullptr) {
    if (id->device->pd == nullptr) id->device->pd = ibv_alloc_pd(id->device->ctx);
    pd = id->device->pd;
  }
  ibv_srq* s = ibv_create_srq(pd, attr);
  if (s == nullptr) return -1;
  id->pub.srq = s;
  id->pub.pd = pd;
  return 0;
}

int rdma_create_srq_ex(rdma_cm_id* pub, ibv_srq_init_attr_ex* attr) {
  if (attr == nullptr) return fail(EINVAL);
  ibv_srq_init_attr a{};
  a.srq_context = attr->srq_context;
  a.attr = attr->attr;
  return rdma_create_srq(pub, (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? attr->pd : nullptr, &a);
}

void rdma_destroy_srq(rdma_cm_id* pub) {
  Id* id = id_of(pub);
  if (id->pub.srq) ibv_destroy_srq(id->pub.srq);
  id->pub.srq = nullptr;
}

int rdma_init_qp_attr(rdma_cm_id* pub, ibv_qp_attr* a, int* mask) {
  Id* id = id_of(pub);
  if (a == nullptr || mask == nullptr) return fail(EINVAL);
  switch (a->qp_state) {
    case IBV_QPS_INIT:
      *a = ibv_qp_attr{};
      a->qp_state = IBV_QPS_INIT;
      a->port_num = 1;
      a->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
      *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      if (id->pub.qp_type == IBV_QPT_UD) {
        a->qkey = kUdpQkey;
        *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
      }
      return 0;
    case IBV_QPS_RTR:
    case IBV_QPS_RTS: {
      if (id->psn == 0) id->psn = random_psn();  // rdma_accept announces this one
      ConnQp c = conn_qp(id);
      c.responder_resources = id->local.responder_resources;
      c.initiator_depth = id->local.initiator_depth;
      if (a->qp_state == IBV_QPS_RTR) conn_rtr_attr(c, a, mask);
      else conn_rts_attr(c, a, mask);
      return 0;
    }
    default:
      return fail(EINVAL);
  }
}

int rdma_migrate_id(rdma_cm_id* pub, rdma_event_channel* channel) {
  Id* id = id_of(pub);
  // The worker sends an ID's events to the channel named when it listened or
  // connected; before that an ID may change channels freely.
  if (id->wid != 0 || !id->listens.empty()) return fail(EOPNOTSUPP);
  if (channel == nullptr) return fail(EINVAL);
  if (id->own_channel) free_channel(id->channel);
  id->own_channel = false;
  id->channel = channel_of(channel);
  id->pub.channel = channel;
  return 0;
}

// As the kernel's ucma_set_option: a wrong optlen is EINVAL, an unknown option
// ENOSYS. ACK_TIMEOUT (RC IDs) is the QP's RTS timeout from then on; TOS,
// REUSEADDR, AFONLY and an IB path are accepted and change nothing here (the
// worker's policies mark and route; a port is one listener's until it goes).
int rdma_set_option(rdma_cm_id* pub, int level, int optname, void* optval, size_t optlen) {
  if (pub == nullptr || optval == nullptr) return fail(EINVAL);
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        return optlen == sizeof(uint8_t) ? 0 : fail(EINVAL);
      case RDMA_OPTION_ID_REUSEADDR:
      case RDMA_OPTION_ID_AFONLY:
        return optlen == sizeof(int) ? 0 : fail(EINVAL);
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        // 5 bits on the wire's QP context (IBA 9.7.6.1.3: 4.096 us x 2^timeout)
        if (optlen != sizeof(uint8_t) || pub->qp_type != IBV_QPT_RC || *static_cast<uint8_t*>(optval) > 31)
          return fail(EINVAL);
        id_of(pub)->ack_timeout = *static_cast<uint8_t*>(optval);
        return 0;
      default:
        return fail(ENOSYS);
    }
  }
  if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) return optlen != 0 ? 0 : fail(EINVAL);
  return fail(ENOSYS);
}

int rdma_notify(rdma_cm_id* pub, ibv_event_type event) {
  (void)pub, (void)event;
  return 0;  // the CM sends no MRA/COMM_EST on its behalf: REP retries cover a lost RTU
}

ibv_context** rdma_get_devices(int* num) {
  std::vector<Device>& ds = devices();
  auto** out = static_cast<ibv_context**>(calloc(ds.size() + 1, sizeof(ibv_context*)));
  if (out == nullptr) return nullptr;
  int n = 0;
  for (Device& d : ds)
    if (ibv_context* c = open_ctx(d)) out[n++] = c;
  if (num) *num = n;
  return out;
}

void rdma_free_devices(ibv_context** list) { free(list); }

__be16 rdma_get_src_port(rdma_cm_id* id) { return id->route.addr.src_sin.sin_port; }
__be16 rdma_get_dst_port(rdma_cm_id* id) { return id->route.addr.dst_sin.sin_port; }

}  // extern "C"
