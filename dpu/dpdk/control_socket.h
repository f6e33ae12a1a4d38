// The agent's control socket: a non-blocking Unix stream socket polled from
// the agent loop (no thread). Requests are newline-delimited JSON texts; each
// gets one reply line from the handler.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace tandem::dpu::dpdk {

class ControlSocket {
 public:
  using Handler = std::function<std::string(const std::string& line)>;
  // Replaces a stale socket file at `path`. Throws std::runtime_error.
  ControlSocket(const std::string& path, Handler h);
  ~ControlSocket();
  ControlSocket(const ControlSocket&) = delete;
  ControlSocket& operator=(const ControlSocket&) = delete;
  // Accepts, reads, answers whatever is ready; returns true if it did anything.
  bool poll();

 private:
  struct Conn {
    int fd = -1;
    std::string in, out;
    bool eof = false;
  };
  std::string path_;
  Handler handler_;
  int listen_fd_ = -1;
  std::vector<Conn> conns_;
};

}  // namespace tandem::dpu::dpdk
