// The drop-in librdmacm's devices, worker connections and channels.
#include "rnic/verbs/rdmacm_core.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "rnic/cm/cm_service.h"
#include "rnic/host/device_registry.h"

namespace tandem::rnic::rdmacm {

namespace {

std::mutex g_mu;  // the device list, worker list and ID index
std::vector<Device>* g_devices = nullptr;
std::vector<std::unique_ptr<Worker>>* g_workers = nullptr;
std::unordered_map<uint64_t, Id*> g_cookies;
std::map<std::pair<Worker*, uint32_t>, Id*> g_wids;
uint64_t g_next_cookie = 1;
ibv_device** g_list = nullptr;  // never freed: its ibv_device pointers are the contexts' devices

void init_locked() {
  if (g_devices) return;
  g_devices = new std::vector<Device>();
  g_workers = new std::vector<std::unique_ptr<Worker>>();
  int n = 0;
  ibv_device** list = g_list = ibv_get_device_list(&n);
  const std::vector<host::DeviceRecord> recs = host::read_devices(host::device_dir());
  for (int i = 0; list && i < n; ++i) {
    const char* name = ibv_get_device_name(list[i]);
    for (const host::DeviceRecord& r : recs) {
      if (r.name != name) continue;
      Device d;
      d.dev = list[i];
      d.name = r.name;
      d.ip = r.vnic_ip;
      const std::string sock = cm::cm_socket_path(r.socket);
      for (auto& w : *g_workers)
        if (w->socket == sock) d.worker = w.get();
      if (d.worker == nullptr) {
        g_workers->push_back(std::make_unique<Worker>());
        g_workers->back()->socket = sock;
        d.worker = g_workers->back().get();
      }
      g_devices->push_back(d);
    }
  }
}

bool connect_unix(const std::string& path, int* fd) {
  *fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (*fd < 0) return false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (connect(*fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    close(*fd);
    *fd = -1;
    errno = e == ENOENT ? ENODEV : e;
    return false;
  }
  return true;
}

// One request, one reply, on a connection of its own or the worker's.
bool roundtrip(int fd, const cm::CmRequest& r, cm::CmReply* rep) {
  if (send(fd, &r, sizeof r, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof r)) {
    errno = EIO;
    return false;
  }
  for (;;) {
    const ssize_t n = recv(fd, rep, sizeof *rep, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof *rep) || rep->magic != cm::kCmMagic) {
      errno = EIO;  // the worker is gone
      return false;
    }
    return true;
  }
}

// The command connection, made on first use (the caller holds w.mu).
bool hello_locked(Worker& w) {
  if (w.fd >= 0) return true;
  int fd;
  if (!connect_unix(w.socket, &fd)) return false;
  cm::CmRequest r;
  r.op = static_cast<uint16_t>(cm::CmOp::kHello);
  r.pid = static_cast<uint32_t>(getpid());
  cm::CmReply rep;
  if (!roundtrip(fd, r, &rep) || rep.status != 0) {
    const int e = rep.status ? rep.status : errno;
    close(fd);
    errno = e;
    return false;
  }
  w.fd = fd;
  w.client = rep.client;
  w.token = rep.token;
  return true;
}

}  // namespace

std::vector<Device>& devices() {
  std::lock_guard<std::mutex> g(g_mu);
  init_locked();
  return *g_devices;
}

Device* device_by_ip(uint32_t ip) {
  for (Device& d : devices())
    if (d.ip == ip) return &d;
  return nullptr;
}

Device* device_by_ctx(ibv_context* ctx) {
  for (Device& d : devices())
    if (d.ctx == ctx) return &d;
  return nullptr;
}

std::vector<Worker*> workers() {
  devices();
  std::lock_guard<std::mutex> g(g_mu);
  std::vector<Worker*> out;
  for (auto& w : *g_workers) out.push_back(w.get());
  return out;
}

ibv_context* open_ctx(Device& d) {
  std::lock_guard<std::mutex> g(g_mu);
  if (d.ctx == nullptr) d.ctx = ibv_open_device(d.dev);
  return d.ctx;
}

int command(Worker& w, cm::CmRequest& r, cm::CmReply* rep) {
  std::lock_guard<std::mutex> g(w.mu);
  if (!hello_locked(w)) return -1;
  r.seq = ++w.seq;
  if (!roundtrip(w.fd, r, rep)) return -1;
  if (rep->status != 0) {
    errno = rep->status;
    return -1;
  }
  return 0;
}

bool channel_attach(Channel& ch, Worker& w) {
  std::lock_guard<std::mutex> g(ch.mu);
  if (ch.conns.count(&w)) return true;
  {
    std::lock_guard<std::mutex> wg(w.mu);
    if (!hello_locked(w)) return false;
  }
  int fd;
  if (!connect_unix(w.socket, &fd)) return false;
  cm::CmRequest r;
  r.op = static_cast<uint16_t>(cm::CmOp::kChannel);
  r.client = w.client;
  r.token = w.token;
  r.channel = ch.no;
  cm::CmReply rep;
  if (!roundtrip(fd, r, &rep) || rep.status != 0) {
    close(fd);
    errno = rep.status ? rep.status : EIO;
    return false;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &w;
  epoll_ctl(ch.pub.fd, EPOLL_CTL_ADD, fd, &ev);
  ch.conns[&w] = fd;
  return true;
}

void post_local(Channel& ch, rdma_cm_event* e) {
  std::lock_guard<std::mutex> g(ch.mu);
  ch.queue.push_back(e);
  const uint64_t one = 1;
  (void)!write(ch.local, &one, sizeof one);
}

Id* id_by_cookie(uint64_t cookie) {
  std::lock_guard<std::mutex> g(g_mu);
  const auto it = g_cookies.find(cookie);
  return it == g_cookies.end() ? nullptr : it->second;
}

Id* id_by_wid(Worker* w, uint32_t wid) {
  std::lock_guard<std::mutex> g(g_mu);
  const auto it = g_wids.find({w, wid});
  return it == g_wids.end() ? nullptr : it->second;
}

void index_wid(Id* id) {
  std::lock_guard<std::mutex> g(g_mu);
  if (id->worker && id->wid) g_wids[{id->worker, id->wid}] = id;
}

uint64_t new_cookie(Id* id) {
  std::lock_guard<std::mutex> g(g_mu);
  const uint64_t c = g_next_cookie++;
  g_cookies[c] = id;
  return c;
}

void unindex(Id* id) {
  std::lock_guard<std::mutex> g(g_mu);
  g_cookies.erase(id->cookie);
  if (id->worker && id->wid) g_wids.erase({id->worker, id->wid});
  for (auto& [w, wid] : id->listens) g_wids.erase({w, wid});
}

}  // namespace tandem::rnic::rdmacm
