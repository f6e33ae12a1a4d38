#include "rnic/perf/oob_channel.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace tandem::rnic::perf {

namespace {
std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

int poll_ms(double seconds) {
  double ms = seconds * 1000;
  return ms > 1e9 ? -1 : static_cast<int>(ms);
}
}  // namespace

OobChannel::~OobChannel() {
  if (fd_ >= 0) close(fd_);
}

OobChannel OobChannel::accept_one(uint16_t port, double timeout_s) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) throw std::runtime_error(errno_text("socket"));
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(lfd, 1) != 0) {
    std::string e = errno_text(("listen on TCP port " + std::to_string(port)).c_str());
    close(lfd);
    throw std::runtime_error(e);
  }
  pollfd p{lfd, POLLIN, 0};
  int r = ::poll(&p, 1, poll_ms(timeout_s));
  if (r <= 0) {
    close(lfd);
    throw std::runtime_error("no client connected to TCP port " + std::to_string(port) + " in time");
  }
  int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
  int e = errno;
  close(lfd);
  if (fd < 0) {
    errno = e;
    throw std::runtime_error(errno_text("accept"));
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return OobChannel(fd);
}

OobChannel OobChannel::connect_to(const std::string& host, uint16_t port, double timeout_s) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    throw std::runtime_error("cannot resolve server '" + host + "': " + gai_strerror(rc));
  sockaddr_in a;
  std::memcpy(&a, res->ai_addr, sizeof a);
  freeaddrinfo(res);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error(errno_text("socket"));
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return OobChannel(fd);
    }
    int e = errno;
    close(fd);
    // A server started at the same moment may not listen yet: retry a refusal.
    if (e != ECONNREFUSED || std::chrono::steady_clock::now() >= deadline) {
      errno = e;
      throw std::runtime_error(errno_text(("connect to " + host + ":" + std::to_string(port)).c_str()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void OobChannel::send_all(const void* p, std::size_t len) {
  auto* b = static_cast<const uint8_t*>(p);
  while (len > 0) {
    ssize_t n = ::send(fd_, b, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("peer disconnected (TCP exchange: " + std::string(std::strerror(errno)) + ")");
    b += n;
    len -= static_cast<std::size_t>(n);
  }
}

void OobChannel::recv_all(void* p, std::size_t len, double timeout_s) {
  auto* b = static_cast<uint8_t*>(p);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (len > 0) {
    double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) throw std::runtime_error("peer did not answer on the TCP exchange in time");
    pollfd pf{fd_, POLLIN, 0};
    int r = ::poll(&pf, 1, poll_ms(left) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t n = ::recv(fd_, b, len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == 0) throw std::runtime_error("peer disconnected (TCP exchange closed)");
    if (n < 0) throw std::runtime_error("peer disconnected (TCP exchange: " + std::string(std::strerror(errno)) + ")");
    b += n;
    len -= static_cast<std::size_t>(n);
  }
}

bool OobChannel::readable() {
  uint8_t b;
  return ::recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

bool OobChannel::peer_closed() {
  uint8_t b;
  ssize_t n = ::recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
  return false;
}

uint32_t OobChannel::local_ipv4() const {
  sockaddr_in a{};
  socklen_t l = sizeof a;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &l) != 0) return 0;
  return a.sin_addr.s_addr;
}

}  // namespace tandem::rnic::perf
