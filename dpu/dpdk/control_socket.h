// The agent's control socket: a non-blocking Unix stream socket polled from
// the agent loop (no thread). Requests are newline-delimited JSON texts; each
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
#pragma once
#include <atomic>
#include <cstdint>
#include <thread>
#include <string>
#include <utility>
#include <vector>

namespace tandem::dpu {
class ControlApi;
}

namespace tandem::dpu::dpdk {

class ControlSocket {
 public:
  // Replaces a stale socket file at `path`. Throws std::runtime_error.
  ControlSocket(const std::string& path, ControlApi& api);
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
  };
  const Stats& stats() const noexcept { return stats_; }

 private:
  struct Conn {
    int fd = -1;
    std::string in, out;
    bool eof = false;
    bool waiting = false;  // its request is the running job
  };
  void handle_lines(Conn& c);
  bool start_checkpoint(const std::string& db_path);
  void reap_checkpoint();
  std::string stats_reply(bool reset);

  std::string path_;
  ControlApi& api_;
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

}  // namespace tandem::dpu::dpdk
