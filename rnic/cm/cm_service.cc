#include "rnic/cm/cm_service.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <stdexcept>

namespace tandem::rnic::cm {

namespace {

constexpr uint64_t kListenTag = ~uint64_t{0};

}  // namespace

CmService::CmService(CmServiceConfig c, CmEngine& engine, GsiRings* rings)
    : c_(std::move(c)), e_(engine), rings_(rings) {
  std::random_device rd;
  token_seed_ = (uint64_t{rd()} << 32) | rd();
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  if (ep_ < 0) throw std::runtime_error("cm: epoll_create1: " + std::string(std::strerror(errno)));
  if (c_.socket_path.empty()) return;  // no socket: commands only through tests
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (c_.socket_path.size() >= sizeof a.sun_path) throw std::runtime_error("cm: socket path too long");
  std::strncpy(a.sun_path, c_.socket_path.c_str(), sizeof a.sun_path - 1);
  unlink(c_.socket_path.c_str());
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listen_fd_, 64) != 0)
    throw std::runtime_error("cm: cannot listen on " + c_.socket_path + ": " + std::strerror(errno));
  if (c_.world_accessible) chmod(c_.socket_path.c_str(), 0666);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  epoll_ctl(ep_, EPOLL_CTL_ADD, listen_fd_, &ev);
}

CmService::~CmService() {
  for (auto& [fd, id] : fd_client_) close(fd);
  for (auto& [fd, ch] : fd_channel_) close(fd);
  for (int fd : pending_) close(fd);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(c_.socket_path.c_str());
  }
  if (ep_ >= 0) close(ep_);
}

void CmService::accept_all() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = static_cast<uint64_t>(fd);
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
    pending_.push_back(fd);
  }
}

void CmService::close_fd(int fd, uint64_t now) {
  epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  pending_.erase(std::remove(pending_.begin(), pending_.end(), fd), pending_.end());
  if (auto it = fd_channel_.find(fd); it != fd_channel_.end()) {
    if (auto c = clients_.find(it->second.first); c != clients_.end()) c->second.channels.erase(it->second.second);
    fd_channel_.erase(it);
    return;
  }
  if (auto it = fd_client_.find(fd); it != fd_client_.end()) {
    // The application is gone (exit or crash): its listeners and connections
    // go as the kernel's go for a dead process (DREQ/REJ to the peers).
    const uint32_t id = it->second;
    fd_client_.erase(it);
    e_.remove_client(id, now);
    if (auto c = clients_.find(id); c != clients_.end()) {
      for (auto& [ch, efd] : c->second.channels) {
        epoll_ctl(ep_, EPOLL_CTL_DEL, efd, nullptr);
        close(efd);
        fd_channel_.erase(efd);
      }
      clients_.erase(c);
    }
  }
}

void CmService::on_readable(int fd, uint64_t now) {
  for (;;) {
    CmRequest r;
    const ssize_t n = recv(fd, &r, sizeof r, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      close_fd(fd, now);
      return;
    }
    if (static_cast<std::size_t>(n) != sizeof r || r.magic != kCmMagic) {
      ++k_.bad_requests;
      close_fd(fd, now);
      return;
    }
    if (auto it = fd_client_.find(fd); it != fd_client_.end()) {
      handle(clients_[it->second], r, now);
      continue;
    }
    if (fd_channel_.count(fd)) {  // an event connection says nothing after its hello
      ++k_.bad_requests;
      close_fd(fd, now);
      return;
    }
    CmReply rep;
    rep.op = r.op;
    rep.seq = r.seq;
    if (r.op == static_cast<uint16_t>(CmOp::kHello)) {
      ucred cr{};
      socklen_t len = sizeof cr;
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len);
      if (c_.may_attach && !c_.may_attach(cr.uid, cr.gid, r.local_ip)) {
        ++k_.refused;
        rep.status = EACCES;
        send(fd, &rep, sizeof rep, MSG_NOSIGNAL | MSG_DONTWAIT);
        close_fd(fd, now);
        return;
      }
      Client c;
      c.id = next_client_++;
      c.fd = fd;
      c.uid = cr.uid;
      c.gid = cr.gid;
      c.hello = true;
      c.token = token_seed_ ^ (uint64_t{c.id} * 0x9E3779B97F4A7C15ull);
      pending_.erase(std::remove(pending_.begin(), pending_.end(), fd), pending_.end());
      fd_client_[fd] = c.id;
      e_.add_client(c.id, r.local_ip);
      rep.client = c.id;
      rep.token = c.token;
      clients_[c.id] = std::move(c);
      ++k_.clients;
      send(fd, &rep, sizeof rep, MSG_NOSIGNAL | MSG_DONTWAIT);
      continue;
    }
    if (r.op == static_cast<uint16_t>(CmOp::kChannel)) {
      auto c = clients_.find(r.client);
      if (c == clients_.end() || c->second.token != r.token || c->second.channels.count(r.channel)) {
        ++k_.refused;
        rep.status = EACCES;
        send(fd, &rep, sizeof rep, MSG_NOSIGNAL | MSG_DONTWAIT);
        close_fd(fd, now);
        return;
      }
      pending_.erase(std::remove(pending_.begin(), pending_.end(), fd), pending_.end());
      c->second.channels[r.channel] = fd;
      fd_channel_[fd] = {r.client, r.channel};
      send(fd, &rep, sizeof rep, MSG_NOSIGNAL | MSG_DONTWAIT);
      continue;
    }
    ++k_.bad_requests;
    close_fd(fd, now);
    return;
  }
}

void CmService::handle(Client& c, const CmRequest& r, uint64_t now) {
  CmReply rep;
  rep.op = r.op;
  rep.seq = r.seq;
  int st = EINVAL;
  switch (static_cast<CmOp>(r.op)) {
    case CmOp::kResolve: st = e_.resolve(c.id, r, now); break;
    case CmOp::kListen: st = e_.listen(c.id, r, &rep.id, &rep.port); break;
    case CmOp::kConnect: st = e_.connect(c.id, r, now, &rep.id, &rep.port); break;
    case CmOp::kAccept: st = e_.accept(c.id, r, now); break;
    case CmOp::kReject: st = e_.reject(c.id, r, now); break;
    case CmOp::kEstablish: st = e_.establish(c.id, r, now); break;
    case CmOp::kDisconnect: st = e_.disconnect(c.id, r, now); break;
    case CmOp::kDestroy: st = e_.destroy(c.id, r, now); break;
    default: ++k_.bad_requests; break;
  }
  rep.status = st;
  // Events first: an application that reads its reply and then polls its
  // channel must find what the command caused already there.
  flush();
  send(c.fd, &rep, sizeof rep, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void CmService::flush() {
  std::vector<GsiOut>& mads = e_.mads_out();
  for (const GsiOut& o : mads)
    if (rings_ == nullptr || !rings_->out.push(o)) ++k_.ring_full;
  mads.clear();
  std::vector<CmEngine::Event>& evs = e_.events_out();
  for (const CmEngine::Event& ev : evs) {
    const auto c = clients_.find(ev.client);
    int fd = -1;
    if (c != clients_.end())
      if (auto ch = c->second.channels.find(ev.channel); ch != c->second.channels.end()) fd = ch->second;
    if (fd < 0 || send(fd, &ev.msg, sizeof ev.msg, MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof ev.msg))
      ++k_.events_dropped;
    else
      ++k_.events;
  }
  evs.clear();
}

void CmService::serve(uint64_t now, int timeout_ms) {
  epoll_event evs[32];
  const int n = epoll_wait(ep_, evs, 32, timeout_ms);
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.u64 == kListenTag) {
      accept_all();
      continue;
    }
    const int fd = static_cast<int>(evs[i].data.u64);
    if (evs[i].events & EPOLLIN) on_readable(fd, now);
    else if (evs[i].events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) close_fd(fd, now);
  }
  if (rings_ != nullptr) {
    GsiIn in;
    for (int i = 0; i < 256 && rings_->in.pop(&in); ++i) {
      if (in.kind == GsiIn::kRoute) {
        e_.on_route(in.probe, in.route_underlay);
        continue;
      }
      MadSource s;
      s.underlay = in.src_underlay;
      std::memcpy(s.mac, in.src_mac, 6);
      s.pkey = in.pkey;
      s.has_vni = in.has_vni;
      s.vni = in.vni;
      s.req_vnic = in.req_vnic;
      s.req_route_underlay = in.req_route_underlay;
      e_.on_mad(s, in.mad, now);
    }
  }
  next_deadline_ = e_.tick(now);
  flush();
}

}  // namespace tandem::rnic::cm
