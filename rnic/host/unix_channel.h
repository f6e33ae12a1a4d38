// One message over a SOCK_SEQPACKET Unix socket, with file descriptors
// attached (SCM_RIGHTS): how regions travel between application and worker.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace tandem::rnic::host {

inline constexpr std::size_t kMaxFdsPerMessage = 4;

// Sends `len` bytes and `nfds` descriptors as one message. Never raises
// SIGPIPE. Returns bytes sent or -errno.
ssize_t send_message(int sock, const void* buf, std::size_t len, const int* fds,
                     std::size_t nfds) noexcept;

// Receives one message into `buf`; descriptors go to fds[0..*nfds). A message
// longer than `len` or with more than `max_fds` descriptors is an error
// (-EMSGSIZE) and every descriptor it carried is closed. Returns bytes
// received, 0 at end of stream, or -errno (-EAGAIN when nothing is there and
// `dontwait`).
ssize_t recv_message(int sock, void* buf, std::size_t len, int* fds, std::size_t max_fds,
                     std::size_t* nfds, bool dontwait) noexcept;

}  // namespace tandem::rnic::host
