#include "apps/tandemctl/control_client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace tandem::dpu::ctl {

nlohmann::json call(const std::string& socket_path, const nlohmann::json& request) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(a.sun_path)) throw std::runtime_error("socket path too long: " + socket_path);
  std::memcpy(a.sun_path, socket_path.c_str(), socket_path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    std::string e = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("cannot reach tandem-dpu at " + socket_path + ": " + e);
  }
  std::string out = request.dump() + "\n";
  for (std::size_t off = 0; off < out.size();) {
    ssize_t n = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      ::close(fd);
      throw std::runtime_error("lost the connection to tandem-dpu while sending");
    }
    off += static_cast<std::size_t>(n);
  }
  std::string in;
  char buf[65536];
  while (in.find('\n') == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw std::runtime_error("tandem-dpu closed the connection without a reply");
    }
    in.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return nlohmann::json::parse(in.substr(0, in.find('\n')));
}

}  // namespace tandem::dpu::ctl
