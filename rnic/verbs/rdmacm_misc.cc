// The rest of librdmacm's ABI: rdma_getaddrinfo, endpoints (rdma_create_ep),
// rdma_event_str, and what Tandem does not do (multicast, ECE, rsockets),
// which fails as librdmacm documents (-1, errno).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace {

int fail(int e) {
  errno = e;
  return -1;
}

sockaddr* copy_addr(const sockaddr* a, socklen_t len) {
  auto* out = static_cast<sockaddr*>(malloc(len));
  if (out) std::memcpy(out, a, len);
  return out;
}

}  // namespace

// rdmacm_api.cc: a passive endpoint's QP attributes for rdma_get_request.
void tandem_rdmacm_keep_ep_qp(rdma_cm_id* id, ibv_pd* pd, const ibv_qp_init_attr* attr);

extern "C" {

const char* rdma_event_str(rdma_cm_event_type event) {
  // A C caller may pass any int; read its bytes so an out-of-range value is no C++ UB.
  int v;
  std::memcpy(&v, &event, sizeof v);
  switch (v) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints, rdma_addrinfo** res) {
  if (res == nullptr || (node == nullptr && service == nullptr)) return fail(EINVAL);
  addrinfo h{};
  h.ai_family = AF_INET;  // vNIC addresses are IPv4
  h.ai_socktype = SOCK_STREAM;
  if (hints && (hints->ai_flags & RAI_PASSIVE)) h.ai_flags |= AI_PASSIVE;
  if (hints && (hints->ai_flags & RAI_NUMERICHOST)) h.ai_flags |= AI_NUMERICHOST;
  if (hints && hints->ai_family == AF_INET6) return fail(EAFNOSUPPORT);
  addrinfo* ai = nullptr;
  const int rc = getaddrinfo(node, service, &h, &ai);
  if (rc != 0) return fail(rc == EAI_SYSTEM ? errno : ENOENT);
  auto* r = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  if (r == nullptr) {
    freeaddrinfo(ai);
    return fail(ENOMEM);
  }
  r->ai_flags = hints ? hints->ai_flags : 0;
  r->ai_family = AF_INET;
  r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
  r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
  if (r->ai_flags & RAI_PASSIVE) {
    r->ai_src_addr = copy_addr(ai->ai_addr, ai->ai_addrlen);
    r->ai_src_len = ai->ai_addrlen;
  } else {
    r->ai_dst_addr = copy_addr(ai->ai_addr, ai->ai_addrlen);
    r->ai_dst_len = ai->ai_addrlen;
    if (hints && hints->ai_src_addr) {
      r->ai_src_addr = copy_addr(hints->ai_src_addr, hints->ai_src_len);
      r->ai_src_len = hints->ai_src_len;
    }
  }
  freeaddrinfo(ai);
  *res = r;
  return 0;
}

void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    free(res->ai_src_addr);
    free(res->ai_dst_addr);
    free(res->ai_src_canonname);
    free(res->ai_dst_canonname);
    free(res->ai_route);
    free(res->ai_connect);
    free(res);
    res = next;
  }
}

int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || res == nullptr) return fail(EINVAL);
  rdma_cm_id* cm = nullptr;
  if (rdma_create_id(nullptr, &cm, nullptr, static_cast<rdma_port_space>(res->ai_port_space)) != 0) return -1;
  int rc;
  if (res->ai_flags & RAI_PASSIVE) rc = rdma_bind_addr(cm, res->ai_src_addr);
  else {
    rc = rdma_resolve_addr(cm, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (rc == 0) rc = rdma_resolve_route(cm, 2000);
  }
  if (rc == 0 && qp_init_attr) {
    qp_init_attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
    if (!(res->ai_flags & RAI_PASSIVE)) rc = rdma_create_qp(cm, pd, qp_init_attr);
    else tandem_rdmacm_keep_ep_qp(cm, pd, qp_init_attr);
  }
  if (rc != 0) {
    const int e = errno;
    rdma_destroy_id(cm);
    return fail(e);
  }
  *id = cm;
  return 0;
}

void rdma_destroy_ep(rdma_cm_id* id) {
  if (id == nullptr) return;
  if (id->qp) rdma_destroy_qp(id);
  if (id->srq) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

// Multicast and ECE: not done.
int rdma_join_multicast(rdma_cm_id*, sockaddr*, void*) { return fail(EOPNOTSUPP); }
int rdma_join_multicast_ex(rdma_cm_id*, rdma_cm_join_mc_attr_ex*, void*) { return fail(EOPNOTSUPP); }
int rdma_leave_multicast(rdma_cm_id*, sockaddr*) { return fail(EOPNOTSUPP); }
int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) { return fail(EOPNOTSUPP); }
int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) { return fail(EOPNOTSUPP); }
int rdma_reject_ece(rdma_cm_id* id, const void* p, uint8_t len) { return rdma_reject(id, p, len); }

// rsockets: not done (an application falls back to its TCP path when rsocket fails).
int rsocket(int, int, int) { return fail(ENOSYS); }
int rbind(int, const sockaddr*, socklen_t) { return fail(ENOSYS); }
int rlisten(int, int) { return fail(ENOSYS); }
int raccept(int, sockaddr*, socklen_t*) { return fail(ENOSYS); }
int rconnect(int, const sockaddr*, socklen_t) { return fail(ENOSYS); }
int rshutdown(int, int) { return fail(ENOSYS); }
int rclose(int) { return fail(ENOSYS); }
ssize_t rrecv(int, void*, size_t, int) { return fail(ENOSYS); }
ssize_t rrecvfrom(int, void*, size_t, int, sockaddr*, socklen_t*) { return fail(ENOSYS); }
ssize_t rrecvmsg(int, msghdr*, int) { return fail(ENOSYS); }
ssize_t rsend(int, const void*, size_t, int) { return fail(ENOSYS); }
ssize_t rsendto(int, const void*, size_t, int, const sockaddr*, socklen_t) { return fail(ENOSYS); }
ssize_t rsendmsg(int, const msghdr*, int) { return fail(ENOSYS); }
ssize_t rread(int, void*, size_t) { return fail(ENOSYS); }
ssize_t rreadv(int, const iovec*, int) { return fail(ENOSYS); }
ssize_t rwrite(int, const void*, size_t) { return fail(ENOSYS); }
ssize_t rwritev(int, const iovec*, int) { return fail(ENOSYS); }
int rpoll(pollfd*, nfds_t, int) { return fail(ENOSYS); }
int rselect(int, fd_set*, fd_set*, fd_set*, timeval*) { return fail(ENOSYS); }
int rgetpeername(int, sockaddr*, socklen_t*) { return fail(ENOSYS); }
int rgetsockname(int, sockaddr*, socklen_t*) { return fail(ENOSYS); }
int rsetsockopt(int, int, int, const void*, socklen_t) { return fail(ENOSYS); }
int rgetsockopt(int, int, int, void*, socklen_t*) { return fail(ENOSYS); }
int rfcntl(int, int, ...) { return fail(ENOSYS); }
off_t riomap(int, void*, size_t, int, int, off_t) { return fail(ENOSYS); }
int riounmap(int, void*, size_t) { return fail(ENOSYS); }
size_t riowrite(int, const void*, size_t, off_t, int) {
  errno = ENOSYS;
  return 0;
}

}  // extern "C"
