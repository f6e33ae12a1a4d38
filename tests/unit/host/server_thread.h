// Test scaffolding: a HostServer on a real Unix socket in a fresh temp dir,
// polled by a background thread (the stand-in for the worker loop, using the
// adaptive idle mode) under a mutex, so a test can call the blocking
// application library from its own thread and inspect the server between
// calls with with().
#pragma once

#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rnic/host/host_server.h"

namespace tandem::rnic::host::test {

inline std::string make_temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "tandem-host-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) std::abort();
  return buf.data();
}

class ServerThread {
 public:
  explicit ServerThread(ServerConfig config = {}) : dir_(make_temp_dir()) {
    path = dir_ + "/rnic0.sock";
    config.socket_path = path;
    server_ = std::make_unique<HostServer>(config);
    thread_ = std::thread([this] { run(); });
  }
  ~ServerThread() {
    stop();
    std::filesystem::remove_all(dir_);
  }

  // Stops polling and destroys the server (the worker "dies").
  void stop() {
    if (!thread_.joinable()) return;
    stop_ = true;
    thread_.join();
    server_.reset();
  }

  template <typename F>
  auto with(F&& f) {
    std::lock_guard lock(mu_);
    return f(*server_);
  }

  // Polls until pred(server) holds; false after ~5 s.
  template <typename P>
  bool wait_for(P&& pred) {
    for (int i = 0; i < 50000; ++i) {
      if (with([&](HostServer& s) { return pred(s); })) return true;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return false;
  }

  std::string path;

 private:
  void run() {
    uint64_t now = 0;
    int idle = 0;
    while (!stop_) {
      {
        std::lock_guard lock(mu_);
        now += 1'000'000;
        uint64_t before = server_->counters().apps_attached + server_->counters().requests_refused;
        server_->poll(now);
        bool busy = server_->counters().apps_attached + server_->counters().requests_refused != before;
        idle = busy ? 0 : idle + 1;
      }
      if (idle < 64) {
        std::this_thread::yield();
        continue;
      }
      bool sleep;
      {
        std::lock_guard lock(mu_);
        sleep = server_->begin_idle();
      }
      if (sleep) {
        epoll_event ev;
        epoll_wait(server_->wait_fd(), &ev, 1, 2);  // sockets and the wake eventfd
        std::lock_guard lock(mu_);
        server_->end_idle();
      }
      idle = 0;
    }
  }

  std::string dir_;
  std::unique_ptr<HostServer> server_;
  std::mutex mu_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tandem::rnic::host::test
