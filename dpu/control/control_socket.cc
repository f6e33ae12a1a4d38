#include "dpu/control/control_socket.h"

#include <grp.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/log/log.h"
#include "dpu/api/control_api.h"

namespace tandem::dpu {

namespace {
constexpr std::size_t kMaxRequest = 1 << 20;  // a request line larger than this is refused
}  // namespace

ControlSocket::ControlSocket(const std::string& path, ControlApi& api, Clock clock, gid_t group)
    : path_(path), api_(api), now_ns_(std::move(clock)), group_(group) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) throw std::runtime_error("control socket path too long: " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  const bool grouped = group != static_cast<gid_t>(-1);
  // Its run directory: made if missing, never left world-writable by us.
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  if (!dir.empty() && ::mkdir(dir.c_str(), grouped ? 0750 : 0755) == 0 && grouped && ::chown(dir.c_str(), -1, group) != 0)
    throw std::runtime_error("cannot give " + dir + " to the control group: " + std::strerror(errno));
  struct stat ds {};
  if (!dir.empty() && ::stat(dir.c_str(), &ds) == 0 && (ds.st_mode & S_IWOTH) && !(ds.st_mode & S_ISVTX))
    common::log::warn("{} is world-writable: anyone may replace the control socket", dir);
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  ::unlink(path.c_str());
  // Born 0600 (no window in which others may connect), then opened to the group.
  const mode_t old = ::umask(0177);
  const int rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::umask(old);
  if (rc != 0 || (grouped && (::chown(path.c_str(), -1, group) != 0 || ::chmod(path.c_str(), 0660) != 0)) ||
      ::listen(listen_fd_, 16) != 0) {
    std::string e = std::strerror(errno);
    ::close(listen_fd_);
    throw std::runtime_error("cannot listen on control socket " + path + ": " + e);
  }
  api_.store().set_background_checkpointer([this](const std::string& db) { return start_checkpoint(db); });
}

// A second connection copies the WAL into the database while the agent's
// connection goes on (WAL mode lets a writer append meanwhile); the store
// keeps automatic checkpoints off until reap_checkpoint() says it is done.
bool ControlSocket::start_checkpoint(const std::string& db_path) {
  if (ckpt_running_) return false;
  ckpt_done_.store(false, std::memory_order_relaxed);
  ckpt_running_ = true;
  ckpt_thread_ = std::thread([this, db_path] {
    uint64_t t0 = now_ns_();
    sqlite3* db = nullptr;
    int rc = sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
    int log = 0, copied = 0;
    // A fresh connection learns the database is in WAL mode on its first read.
    if (rc == SQLITE_OK) rc = sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) rc = sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
    ckpt_frames_.store(uint64_t(uint32_t(log)) << 32 | uint32_t(copied), std::memory_order_relaxed);
    sqlite3_close(db);
    ckpt_rc_.store(rc, std::memory_order_relaxed);
    ckpt_ns_.store(now_ns_() - t0, std::memory_order_relaxed);
    ckpt_done_.store(true, std::memory_order_release);
  });
  return true;
}

void ControlSocket::reap_checkpoint() {
  if (!ckpt_running_ || !ckpt_done_.load(std::memory_order_acquire)) return;
  ckpt_thread_.join();
  ckpt_running_ = false;
  api_.store().background_checkpoint_done();
  int rc = ckpt_rc_.load(std::memory_order_relaxed);
  uint64_t f = ckpt_frames_.load(std::memory_order_relaxed);
  common::log::info("control: WAL checkpoint {} in the background in {:.1f} ms ({} of {} frames)",
                    rc == SQLITE_OK ? "done" : sqlite3_errstr(rc), ckpt_ns_.load(std::memory_order_relaxed) / 1e6,
                    static_cast<unsigned>(f & 0xFFFFFFFF), static_cast<unsigned>(f >> 32));
}

ControlSocket::~ControlSocket() {
  api_.store().set_background_checkpointer(nullptr);
  if (ckpt_thread_.joinable()) ckpt_thread_.join();
  if (ckpt_running_) api_.store().background_checkpoint_done();
  for (Conn& c : conns_) {
    for (int f : c.fds) ::close(f);
    ::close(c.fd);
  }
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(path_.c_str());
  }
}

std::string ControlSocket::stats_reply(bool reset) {
  nlohmann::json j = {{"ok", true},
                      {"polls", stats_.polls},
                      {"requests", stats_.requests},
                      {"held_back_polls", stats_.held_back},
                      {"jobs", stats_.jobs},
                      {"job_steps", stats_.job_steps},
                      {"job_running", api_.busy()},
                      {"poll_max_us", stats_.poll_max_ns / 1000.0},
                      {"refused_peers", stats_.refused_peers},
                      {"fds_dropped", stats_.fds_dropped},
                      {"loop_gap_max_us", stats_.gap_max_ns / 1000.0}};
  if (reset) {
    stats_.poll_max_ns = 0;
    stats_.gap_max_ns = 0;
  }
  return j.dump();
}

void ControlSocket::handle_lines(Conn& c) {
  std::size_t nl;
  while ((nl = c.in.find('\n')) != std::string::npos) {
    std::string line = c.in.substr(0, nl);
    if (line.empty()) {
      c.in.erase(0, nl + 1);
      continue;
    }
    if (line.find("\"control.stats\"") != std::string::npos) {
      nlohmann::json req = nlohmann::json::parse(line, nullptr, false);
      if (req.is_object() && req.value("cmd", "") == "control.stats") {
        c.in.erase(0, nl + 1);
        ++stats_.requests;
        c.out += stats_reply(req.value("reset", false)) + "\n";
        continue;
      }
    }
    // A request that says "fd" takes the oldest descriptor this connection sent.
    Caller caller{c.trusted, c.fds.empty() ? -1 : c.fds.front()};
    const int offered = caller.fd;
    ControlReply r = api_.begin_line(line, caller);
    if (offered >= 0 && caller.fd < 0) c.fds.erase(c.fds.begin());
    if (r.kind == ControlReply::Kind::kBusy) {  // stays in the buffer until the job is done
      ++stats_.held_back;
      return;
    }
    c.in.erase(0, nl + 1);
    ++stats_.requests;
    if (r.kind == ControlReply::Kind::kDone) {
      c.out += r.text + "\n";
      continue;
    }
    c.waiting = true;  // its reply comes when the job ends; its next lines wait
    job_fd_ = c.fd;
    ++stats_.jobs;
    job_trace_ = JobTrace{};
    job_trace_.started_ns = now_ns_();
    return;
  }
}

// Root, the agent's own user, or (with a control group) a member of it.
bool ControlSocket::peer_allowed(int fd, bool& trusted) const {
  ucred cr{};
  socklen_t len = sizeof cr;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) return false;
  trusted = cr.uid == 0 || cr.uid == ::geteuid();
  if (trusted) return true;
  if (group_ == static_cast<gid_t>(-1)) return false;
  if (cr.gid == group_) return true;
  gid_t groups[256];
  len = sizeof groups;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) return false;
  for (std::size_t i = 0; i < len / sizeof(gid_t); ++i)
    if (groups[i] == group_) return true;
  return false;
}

// Reads what is ready, with any descriptors passed alongside (SCM_RIGHTS).
void ControlSocket::receive(Conn& c, bool& did) {
  char buf[65536];
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kMaxFds)];
  for (;;) {
    iovec iov{buf, sizeof buf};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl;
    mh.msg_controllen = sizeof ctl;
    ssize_t n = ::recvmsg(c.fd, &mh, MSG_CMSG_CLOEXEC);
    for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); n >= 0 && cm; cm = CMSG_NXTHDR(&mh, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < k; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof f);
        if (c.fds.size() < kMaxFds) {
          c.fds.push_back(f);
        } else {
          ::close(f);
          ++stats_.fds_dropped;
        }
      }
    }
    if (n > 0) {
      c.in.append(buf, static_cast<std::size_t>(n));
      did = true;
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.eof = true;
    break;
  }
}

bool ControlSocket::poll() {
  uint64_t t0 = now_ns_();
  if (last_poll_ns_) {
    uint64_t gap = t0 - last_poll_ns_;
    stats_.gap_max_ns = std::max(stats_.gap_max_ns, gap);
    if (api_.busy()) job_trace_.gap_max_ns = std::max(job_trace_.gap_max_ns, gap);
  }
  last_poll_ns_ = t0;
  ++stats_.polls;
  bool did = false;
  reap_checkpoint();
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    did = true;
    bool trusted = false;
    if (!peer_allowed(fd, trusted)) {
      ++stats_.refused_peers;
      static const char kNo[] = "{\"ok\":false,\"code\":\"forbidden\",\"error\":\"this user may not use tandem-dpu\"}\n";
      (void)!::send(fd, kNo, sizeof kNo - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      continue;
    }
    Conn c;
    c.fd = fd;
    c.trusted = trusted;
    conns_.push_back(std::move(c));
  }
  for (Conn& c : conns_) receive(c, did);
  // The running job first: one bounded step per poll, its reply when it ends.
  if (api_.busy()) {
    did = true;
    const char* phase = api_.job_phase();
    uint64_t s0 = now_ns_();
    std::optional<std::string> reply = api_.step();
    uint64_t s1 = now_ns_();
    ++stats_.job_steps;
    ++job_trace_.steps;
    auto& ph = job_trace_.phases;
    if (ph.empty() || ph.back().name != phase) ph.push_back({phase});
    ++ph.back().steps;
    ph.back().total_ns += s1 - s0;
    ph.back().max_ns = std::max(ph.back().max_ns, s1 - s0);
    if (s1 - s0 > job_trace_.step_max_ns) {
      job_trace_.step_max_ns = s1 - s0;
      job_trace_.step_max_phase = phase;
    }
    if (reply) {
      for (Conn& c : conns_)
        if (c.fd == job_fd_) {
          c.out += *reply + "\n";
          c.waiting = false;
        }
      job_fd_ = -1;
      std::string phases;
      for (const auto& p : job_trace_.phases) {
        char b[128];
        std::snprintf(b, sizeof b, "%s%s %llu x %.2f max %.2f", phases.empty() ? "" : ", ", p.name.c_str(),
                      static_cast<unsigned long long>(p.steps), p.total_ns / 1e6 / static_cast<double>(p.steps),
                      p.max_ns / 1e6);
        phases += b;
      }
      common::log::info("control: job done in {:.1f} ms over {} steps; longest step {:.2f} ms ({}), "
                        "longest loop gap {:.2f} ms; steps per phase (count x mean, max ms): {}",
                        (s1 - job_trace_.started_ns) / 1e6, job_trace_.steps, job_trace_.step_max_ns / 1e6,
                        job_trace_.step_max_phase, job_trace_.gap_max_ns / 1e6, phases);
    }
  }
  for (Conn& c : conns_) {
    if (!c.waiting) handle_lines(c);
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
    Conn& c = conns_[i];
    // A connection whose client left is closed, unless a held-back change is
    // still in its buffer (it runs when the job is done, as sent).
    bool pending = c.waiting || c.in.find('\n') != std::string::npos;
    if (c.eof && c.out.empty() && !pending) {
      if (c.fd == job_fd_) job_fd_ = -1;
      for (int f : c.fds) ::close(f);
      ::close(c.fd);
      conns_[i] = std::move(conns_.back());
      conns_.pop_back();
    } else {
      ++i;
    }
  }
  stats_.poll_max_ns = std::max(stats_.poll_max_ns, now_ns_() - t0);
  return did;
}

}  // namespace tandem::dpu
