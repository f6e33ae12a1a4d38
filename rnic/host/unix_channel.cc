#include "rnic/host/unix_channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tandem::rnic::host {

ssize_t send_message(int sock, const void* buf, std::size_t len, const int* fds,
                     std::size_t nfds) noexcept {
  if (nfds > kMaxFdsPerMessage) return -EINVAL;
  iovec iov{const_cast<void*>(buf), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  if (nfds > 0) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  for (;;) {
    ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno != EINTR) return -errno;
  }
}

ssize_t recv_message(int sock, void* buf, std::size_t len, int* fds, std::size_t max_fds,
                     std::size_t* nfds, bool dontwait) noexcept {
  *nfds = 0;
  iovec iov{buf, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  // Room for more descriptors than we accept, so an oversupply is seen (and
  // closed) rather than silently truncated.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * (kMaxFdsPerMessage + 4))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  for (;;) {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | (dontwait ? MSG_DONTWAIT : 0));
    if (n >= 0 || errno != EINTR) break;
  }
  if (n < 0) return -errno;
  int got[kMaxFdsPerMessage + 4];
  std::size_t ngot = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < k && ngot < sizeof got / sizeof got[0]; ++i) {
      std::memcpy(&got[ngot++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
  }
  bool bad = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || ngot > max_fds;
  if (bad) {
    for (std::size_t i = 0; i < ngot; ++i) close(got[i]);
    return -EMSGSIZE;
  }
  for (std::size_t i = 0; i < ngot; ++i) fds[i] = got[i];
  *nfds = ngot;
  return n;
}

}  // namespace tandem::rnic::host
