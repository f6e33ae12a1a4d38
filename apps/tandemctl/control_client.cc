#include "apps/tandemctl/control_client.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace tandem::dpu::ctl {

namespace {
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

nlohmann::json call(const std::string& socket_path, const nlohmann::json& request_in) {
  nlohmann::json request = request_in;
  Fd file;
  if (request.value("cmd", "") == "mapping.import" && request.contains("path") && request["path"].is_string()) {
    const std::string path = request["path"];
    file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (file.fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
    request["fd"] = true;
  }
  const int pass_fd = file.fd;
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
    ssize_t n;
    if (off == 0 && pass_fd >= 0) {  // the descriptor rides on the request's first bytes
      iovec iov{out.data(), out.size()};
      alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
      msghdr mh{};
      mh.msg_iov = &iov;
      mh.msg_iovlen = 1;
      mh.msg_control = ctl;
      mh.msg_controllen = sizeof ctl;
      cmsghdr* cm = CMSG_FIRSTHDR(&mh);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
      n = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
    } else {
      n = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    }
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
