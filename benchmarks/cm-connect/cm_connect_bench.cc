// cm-connect's two sides: RC connections set up through rdma_cm (the worker's
// connection manager, MADs on QP1) or through a TCP exchange of QPN/PSN/GID
// (what perftest does without -R), with the same verbs library and QPs.
//   cm_connect_bench server cm|tcp IP PORT N
//   cm_connect_bench client cm|tcp SRC_IP DST_IP PORT N PARALLEL
// The client runs PARALLEL threads, each setting up its share of N connections
// one after another (so PARALLEL are in flight at once), and prints one JSON
// line: connections per second and the set-up latency percentiles (from the
// first call, rdma_resolve_addr or TCP connect, to a connected QP in RTS).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

sockaddr_in addr_of(const char* ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

// ---------------------------------------------------------------- verbs (TCP)

struct Verbs {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  std::mutex mu;
};

ibv_context* open_by_ip(const char* ip) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  in_addr want{};
  inet_pton(AF_INET, ip, &want);
  for (int i = 0; i < n; ++i) {
    ibv_context* c = ibv_open_device(list[i]);
    if (!c) continue;
    ibv_gid g{};
    if (ibv_query_gid(c, 1, 0, &g) == 0 && std::memcmp(g.raw + 12, &want, 4) == 0) return c;
    ibv_close_device(c);
  }
  return nullptr;
}

struct Wire {
  uint32_t qpn, psn;
  uint8_t gid[16];
};

ibv_qp* make_qp(Verbs& v) {
  std::lock_guard<std::mutex> g(v.mu);
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = v.cq;
  a.cap.max_send_wr = a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.qp_type = IBV_QPT_RC;
  ibv_qp* qp = ibv_create_qp(v.pd, &a);
  if (!qp) die("ibv_create_qp");
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.port_num = 1;
  at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) die("INIT");
  return qp;
}

void connect_qp(Verbs& v, ibv_qp* qp, uint32_t my_psn, const Wire& peer) {
  std::lock_guard<std::mutex> g(v.mu);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("RTR");
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.sq_psn = my_psn;
  s.timeout = 14;
  s.retry_cnt = 7;
  s.rnr_retry = 7;
  s.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_MAX_QP_RD_ATOMIC))
    die("RTS");
}

bool full_io(int fd, void* p, std::size_t n, bool rd) {
  auto* b = static_cast<uint8_t*>(p);
  while (n) {
    const ssize_t k = rd ? read(fd, b, n) : write(fd, b, n);
    if (k <= 0) return false;
    b += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

void open_verbs(Verbs& v, const char* ip) {
  v.ctx = open_by_ip(ip);
  if (!v.ctx) die("no device with that IP");
  v.pd = ibv_alloc_pd(v.ctx);
  v.cq = ibv_create_cq(v.ctx, 4096, nullptr, nullptr, 0);
  if (!v.pd || !v.cq) die("pd/cq");
}

int tcp_server(const char* ip, int port, int n) {
  Verbs v;
  open_verbs(v, ip);
  ibv_gid gid{};
  ibv_query_gid(v.ctx, 1, 0, &gid);
  const int ls = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = addr_of("127.0.0.1", port);
  if (bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(ls, 1024)) die("tcp listen");
  std::printf("READY\n");
  std::fflush(stdout);
  std::vector<std::thread> ts;
  std::vector<ibv_qp*> qps(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int fd = accept(ls, nullptr, nullptr);
    if (fd < 0) die("accept");
    ts.emplace_back([&, fd, i] {
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ibv_qp* qp = make_qp(v);
      Wire peer{}, me{qp->qp_num, static_cast<uint32_t>(std::rand() & 0xFFFFFF), {}};
      std::memcpy(me.gid, gid.raw, 16);
      if (!full_io(fd, &peer, sizeof peer, true) || !full_io(fd, &me, sizeof me, false)) die("exchange");
      connect_qp(v, qp, me.psn, peer);
      char ok = 1;
      full_io(fd, &ok, 1, false);
      full_io(fd, &ok, 1, true);  // the client is done with it
      qps[static_cast<std::size_t>(i)] = qp;
      close(fd);
    });
  }
  for (auto& t : ts) t.join();
  for (ibv_qp* qp : qps) ibv_destroy_qp(qp);
  return 0;
}

// ------------------------------------------------------------------ rdma_cm

int cm_server(const char* ip, int port, int n) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* l = nullptr;
  if (!ch || rdma_create_id(ch, &l, nullptr, RDMA_PS_TCP)) die("create");
  sockaddr_in a = addr_of(ip, port);
  if (rdma_bind_addr(l, reinterpret_cast<sockaddr*>(&a)) || rdma_listen(l, 1024)) die("listen");
  ibv_cq* cq = ibv_create_cq(l->verbs, 4096, nullptr, nullptr, 0);
  ibv_pd* pd = ibv_alloc_pd(l->verbs);
  if (!cq || !pd) die("pd/cq");
  std::printf("READY\n");
  std::fflush(stdout);
  int gone = 0;
  while (gone < n) {
    rdma_cm_event* e;
    if (rdma_get_cm_event(ch, &e)) die("rdma_get_cm_event");
    rdma_cm_id* id = e->id;
    const rdma_cm_event_type t = e->event;
    rdma_ack_cm_event(e);
    if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
      ibv_qp_init_attr qa{};
      qa.send_cq = qa.recv_cq = cq;
      qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
      qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
      qa.qp_type = IBV_QPT_RC;
      if (rdma_create_qp(id, pd, &qa)) die("rdma_create_qp");
      rdma_conn_param p{};
      p.responder_resources = p.initiator_depth = 1;
      p.rnr_retry_count = 7;
      if (rdma_accept(id, &p)) die("rdma_accept");
    } else if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_UNREACHABLE ||
               t == RDMA_CM_EVENT_REJECTED) {
      rdma_destroy_qp(id);
      rdma_destroy_id(id);
      ++gone;
    }
  }
  rdma_destroy_id(l);
  return 0;
}

// ------------------------------------------------------------------ clients

struct Result {
  std::vector<double> us;
  std::mutex mu;
  std::atomic<int> failed{0};
  double phase_us = 0;  // the longest thread's set-up time (its connections run back to back)
  void thread_done(double us) {
    std::lock_guard<std::mutex> g(mu);
    phase_us = std::max(phase_us, us);
  }
};

void cm_client_thread(const char* src, const char* dst, int port, int count, Result& res) {
  rdma_event_channel* ch = rdma_create_event_channel();
  sockaddr_in s = addr_of(src, 0), d = addr_of(dst, port);
  std::vector<rdma_cm_id*> done;
  const auto start = Clock::now();
  auto expect = [&](rdma_cm_event_type want) {
    rdma_cm_event* e;
    if (rdma_get_cm_event(ch, &e)) return false;
    const bool ok = e->event == want && e->status == 0;
    rdma_ack_cm_event(e);
    return ok;
  };
  for (int i = 0; i < count; ++i) {
    const auto t0 = Clock::now();
    rdma_cm_id* id = nullptr;
    bool ok = rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) == 0 &&
              rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&s), reinterpret_cast<sockaddr*>(&d), 2000) == 0 &&
              expect(RDMA_CM_EVENT_ADDR_RESOLVED) && rdma_resolve_route(id, 2000) == 0 &&
              expect(RDMA_CM_EVENT_ROUTE_RESOLVED);
    if (ok) {
      ibv_qp_init_attr qa{};
      qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
      qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
      qa.qp_type = IBV_QPT_RC;
      rdma_conn_param p{};
      p.responder_resources = p.initiator_depth = 1;
      p.retry_count = p.rnr_retry_count = 7;
      ok = rdma_create_qp(id, nullptr, &qa) == 0 && rdma_connect(id, &p) == 0 && expect(RDMA_CM_EVENT_ESTABLISHED);
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (!ok) {
      ++res.failed;
    } else {
      std::lock_guard<std::mutex> g(res.mu);
      res.us.push_back(us);
    }
    if (id) done.push_back(id);
  }
  res.thread_done(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  for (rdma_cm_id* id : done) {  // torn down after the measurement
    if (id->qp && rdma_disconnect(id) == 0) {
      rdma_cm_event* e;
      rdma_get_cm_event(ch, &e);
      rdma_ack_cm_event(e);
    }
    if (id->qp) rdma_destroy_qp(id);
    rdma_destroy_id(id);
  }
  rdma_destroy_event_channel(ch);
}

void tcp_client_thread(Verbs& v, const ibv_gid& gid, int port, int count, Result& res) {
  std::vector<std::pair<int, ibv_qp*>> held;
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) {
    const auto t0 = Clock::now();
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = addr_of("127.0.0.1", port);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a)) die("tcp connect");
    ibv_qp* qp = make_qp(v);
    Wire me{qp->qp_num, static_cast<uint32_t>(std::rand() & 0xFFFFFF), {}}, peer{};
    std::memcpy(me.gid, gid.raw, 16);
    char ok = 0;
    const bool good = full_io(fd, &me, sizeof me, false) && full_io(fd, &peer, sizeof peer, true);
    if (good) connect_qp(v, qp, me.psn, peer);
    const bool fin = good && full_io(fd, &ok, 1, true);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (!fin) {
      ++res.failed;
    } else {
      std::lock_guard<std::mutex> g(res.mu);
      res.us.push_back(us);
    }
    held.emplace_back(fd, qp);
  }
  res.thread_done(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  for (auto& [fd, qp] : held) {
    char ok = 1;
    full_io(fd, &ok, 1, false);
    close(fd);
    ibv_destroy_qp(qp);
  }
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 6 && std::strcmp(argv[1], "server") == 0) {
    const int port = std::atoi(argv[4]), n = std::atoi(argv[5]);
    return std::strcmp(argv[2], "cm") == 0 ? cm_server(argv[3], port, n) : tcp_server(argv[3], port, n);
  }
  if (argc < 8 || std::strcmp(argv[1], "client") != 0) {
    std::fprintf(stderr, "usage: cm_connect_bench server cm|tcp IP PORT N | client cm|tcp SRC DST PORT N PARALLEL\n");
    return 2;
  }
  const bool cm = std::strcmp(argv[2], "cm") == 0;
  const char *src = argv[3], *dst = argv[4];
  const int port = std::atoi(argv[5]), n = std::atoi(argv[6]), par = std::max(1, std::atoi(argv[7]));
  Result res;
  Verbs v;
  ibv_gid gid{};
  if (!cm) {
    open_verbs(v, src);
    ibv_query_gid(v.ctx, 1, 0, &gid);
  }
  const auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < par; ++t) {
    const int count = n / par + (t < n % par ? 1 : 0);
    if (cm) ts.emplace_back(cm_client_thread, src, dst, port, count, std::ref(res));
    else ts.emplace_back(tcp_client_thread, std::ref(v), std::cref(gid), port, count, std::ref(res));
  }
  for (auto& t : ts) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  // Connections per second over the set-up phase (the longest thread's; teardown excluded).
  std::printf("{\"mode\":\"%s\",\"connections\":%zu,\"failed\":%d,\"parallel\":%d,\"conn_per_s\":%.1f,"
              "\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,\"phase_s\":%.3f,\"wall_s\":%.3f}\n",
              cm ? "rdma_cm" : "tcp", res.us.size(), res.failed.load(), par,
              res.phase_us > 0 ? static_cast<double>(res.us.size()) / (res.phase_us / 1e6) : 0.0, pct(res.us, 0.5),
              pct(res.us, 0.99), pct(res.us, 1.0), res.phase_us / 1e6, wall);
  return res.failed.load() ? 1 : 0;
}
