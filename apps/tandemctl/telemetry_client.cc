#include "apps/tandemctl/telemetry_client.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

namespace tandem::dpu::ctl {
namespace {

constexpr std::size_t kMaxReply = 1 << 20;

class Conn {
 public:
  explicit Conn(const std::string& path) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (path.size() >= sizeof(a.sun_path)) return;
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    timeval tv{2, 0};  // a process stuck in its telemetry thread must not hang tandemctl
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) close();
  }
  ~Conn() { close(); }
  bool ok() const { return fd_ >= 0; }
  nlohmann::json recv() {
    std::string buf(kMaxReply, '\0');
    const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n <= 0) return nullptr;
    return nlohmann::json::parse(buf.substr(0, static_cast<std::size_t>(n)), nullptr, false);
  }
  bool send(const std::string& s) { return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()); }

 private:
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

}  // namespace

std::vector<TelemetryEndpoint> discover_telemetry(const std::string& runtime_dir) {
  std::vector<TelemetryEndpoint> out;
  std::error_code ec;
  for (const auto& d : std::filesystem::directory_iterator(runtime_dir, ec)) {
    const std::string sock = (d.path() / "dpdk_telemetry.v2").string();
    if (!std::filesystem::exists(sock, ec)) continue;
    Conn c(sock);
    if (!c.ok()) continue;
    const nlohmann::json hello = c.recv();
    if (!hello.is_object()) continue;
    out.push_back({sock, d.path().filename().string(), hello.value("pid", 0L)});
  }
  return out;
}

nlohmann::json telemetry_query(const TelemetryEndpoint& e, const std::string& cmd) {
  Conn c(e.socket);
  if (!c.ok() || c.recv().is_discarded() || !c.send(cmd)) return nullptr;
  nlohmann::json r = c.recv();
  if (!r.is_object()) return nullptr;
  const std::string key = cmd.substr(0, cmd.find(','));
  return r.contains(key) ? r[key] : nlohmann::json(nullptr);
}

}  // namespace tandem::dpu::ctl
