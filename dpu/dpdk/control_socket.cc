#include "dpu/dpdk/control_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace tandem::dpu::dpdk {

namespace {
constexpr std::size_t kMaxRequest = 1 << 20;  // a request line larger than this is refused
}

ControlSocket::ControlSocket(const std::string& path, Handler h) : path_(path), handler_(std::move(h)) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) throw std::runtime_error("control socket path too long: " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  ::unlink(path.c_str());
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(listen_fd_, 16) != 0) {
    std::string e = std::strerror(errno);
    ::close(listen_fd_);
    throw std::runtime_error("cannot listen on control socket " + path + ": " + e);
  }
}

ControlSocket::~ControlSocket() {
  for (Conn& c : conns_) ::close(c.fd);
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(path_.c_str());
  }
}

bool ControlSocket::poll() {
  bool did = false;
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    conns_.push_back(Conn{fd, {}, {}, false});
    did = true;
  }
  char buf[65536];
  for (Conn& c : conns_) {
    for (;;) {
      ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.append(buf, static_cast<std::size_t>(n));
        did = true;
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.eof = true;
      break;
    }
    std::size_t nl;
    while ((nl = c.in.find('\n')) != std::string::npos) {
      std::string line = c.in.substr(0, nl);
      c.in.erase(0, nl + 1);
      if (!line.empty()) c.out += handler_(line) + "\n";
    }
    if (c.in.size() > kMaxRequest) {
      c.out += "{\"ok\":false,\"code\":\"bad_request\",\"error\":\"request larger than 1 MiB\"}\n";
      c.in.clear();
      c.eof = true;
    }
    while (!c.out.empty()) {
      ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n <= 0) {
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          c.out.clear();
          c.eof = true;
        }
        break;
      }
      c.out.erase(0, static_cast<std::size_t>(n));
      did = true;
    }
  }
  for (std::size_t i = 0; i < conns_.size();) {
    if (conns_[i].eof && conns_[i].out.empty()) {
      ::close(conns_[i].fd);
      conns_[i] = std::move(conns_.back());
      conns_.pop_back();
    } else {
      ++i;
    }
  }
  return did;
}

}  // namespace tandem::dpu::dpdk
