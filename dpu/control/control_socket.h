// The agent's control socket: a non-blocking Unix stream socket polled from
// the agent loop (no thread). I/O but no DPDK, and no clock of its own (the
// caller's is passed in), so the sans-I/O rules of dpu/ hold here too. Requests are newline-delimited JSON texts; each
// gets one reply line from the ControlApi. A long request (mapping import)
// runs as the API's job, advanced a bounded step per poll, and is answered
// when it ends; its connection reads on but handles nothing else meanwhile.
// A change that arrives while the job runs waits in its connection's buffer.
//
// The socket also keeps how long the loop went between two polls and how
// long a poll took (the control plane's share of a loop iteration), answered
// by {"cmd":"control.stats"} (add "reset":true to start a new window) and
// logged when a job ends. An import's WAL checkpoint (copying its pages into
// the database file, ~0.1 s per million rows) runs on a thread of its own
// with its own SQLite connection, so it is not a loop step.
//
// Who may talk to it: the socket file is 0600 (0660 with a control group),
// made in a directory the agent creates if missing (0755, or 0750 with the
// group), and each connection's peer credentials (SO_PEERCRED) are checked
// at accept: root, the agent's own user, or a member of the control group;
// anyone else gets one refusal line and is counted. A mapping import's file
// comes with the request as a descriptor the caller opened (SCM_RIGHTS), so
// the agent reads only what its caller could read.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <string>
#include <utility>
#include <vector>

namespace tandem::dpu {
class ControlApi;

class ControlSocket {
 public:
  // The time in ns (monotonic) for the loop-gap, job and checkpoint
  // statistics: the caller's clock (tandem-dpu's TSC clock), callable from
  // any thread (the checkpoint thread times itself with it).
  using Clock = std::function<uint64_t()>;
  // Replaces a stale socket file at `path`. `group`: members of this group
  // may connect too (-1: none). Throws std::runtime_error.
  ControlSocket(const std::string& path, ControlApi& api, Clock clock, gid_t group = static_cast<gid_t>(-1));
  ~ControlSocket();
  ControlSocket(const ControlSocket&) = delete;
  ControlSocket& operator=(const ControlSocket&) = delete;
  // Accepts, reads, answers whatever is ready, advances a running job;
  // returns true if it did anything.
  bool poll();

  struct Stats {
    uint64_t polls = 0;
    uint64_t requests = 0;
    uint64_t held_back = 0;     // change requests that waited for a job
    uint64_t jobs = 0;
    uint64_t job_steps = 0;
    uint64_t poll_max_ns = 0;   // longest single poll
    uint64_t gap_max_ns = 0;    // longest time from one poll's start to the next one's
    uint64_t refused_peers = 0; // connections from users who may not use the agent
    uint64_t fds_dropped = 0;   // descriptors beyond kMaxFds per connection, closed unread
  };
  const Stats& stats() const noexcept { return stats_; }

 private:
  static constexpr std::size_t kMaxFds = 4;  // descriptors a connection may have waiting
  struct Conn {
    int fd = -1;
    std::string in, out;
    bool eof = false;
    bool waiting = false;  // its request is the running job
    bool trusted = false;  // root or the agent's user: the agent may open paths for it
    std::vector<int> fds;  // passed descriptors, oldest first, for the requests that say "fd"
  };
  bool peer_allowed(int fd, bool& trusted) const;
  void receive(Conn& c, bool& did);
  void handle_lines(Conn& c);
  bool start_checkpoint(const std::string& db_path);
  void reap_checkpoint();
  std::string stats_reply(bool reset);

  std::string path_;
  ControlApi& api_;
  Clock now_ns_;
  gid_t group_;
  int listen_fd_ = -1;
  std::vector<Conn> conns_;
  int job_fd_ = -1;  // connection waiting for the job's reply (-1: gone)
  Stats stats_;
  uint64_t last_poll_ns_ = 0;
  std::thread ckpt_thread_;
  bool ckpt_running_ = false;
  std::atomic<bool> ckpt_done_{false};
  std::atomic<uint64_t> ckpt_ns_{0};
  std::atomic<int> ckpt_rc_{0};
  std::atomic<uint64_t> ckpt_frames_{0};  // WAL frames << 32 | frames copied
  struct JobTrace {
    uint64_t started_ns = 0, steps = 0, step_max_ns = 0, polls = 0, gap_max_ns = 0;
    std::string step_max_phase;
    struct Phase {
      std::string name;
      uint64_t steps = 0, total_ns = 0, max_ns = 0;
    };
    std::vector<Phase> phases;  // in the order the job went through them
  } job_trace_;
};

}  // namespace tandem::dpu
