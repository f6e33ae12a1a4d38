// The TCP connection tandem-perf's two sides swap QP details and results
// over (perftest's out-of-band exchange). Blocking with a deadline, except
// peer_closed(), which the data loops call to notice a peer that went away.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem::rnic::perf {

class OobChannel {
 public:
  OobChannel() = default;
  ~OobChannel();
  OobChannel(OobChannel&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  OobChannel& operator=(OobChannel&&) = delete;
  OobChannel(const OobChannel&) = delete;

  // Server: listen on port (all addresses), accept one client. Throws on failure.
  static OobChannel accept_one(uint16_t port, double timeout_s);
  // Client: connect, retrying while refused for up to timeout_s. Throws on failure.
  static OobChannel connect_to(const std::string& host, uint16_t port, double timeout_s);

  // Sends/receives exactly len bytes; throws std::runtime_error naming the
  // peer's disconnect or the timeout.
  void send_all(const void* p, std::size_t len);
  void recv_all(void* p, std::size_t len, double timeout_s);
  // Non-blocking: true if the peer sent something not yet read.
  bool readable();
  // Non-blocking: the peer closed its end (or reset it) and nothing is left to read.
  bool peer_closed();

  // The address of our end of the connection (IPv4, network order), for the default GID.
  uint32_t local_ipv4() const;
  int fd() const noexcept { return fd_; }

 private:
  explicit OobChannel(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tandem::rnic::perf
