// The worker's connection-manager service: the socket applications' librdmacm
// talks to (cm_protocol.h) and the hand-over to and from the data lcore
// (gsi_ring.h), around one CmEngine. It runs on a control thread of the
// worker (never the lcore): `serve(now, timeout_ms)` waits for the sockets,
// answers commands, takes the lcore's MADs, runs the timers and pushes what
// the engine produced. No clock is read here; `now` comes from the caller.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "rnic/cm/cm_engine.h"
#include "rnic/cm/gsi_ring.h"

namespace tandem::rnic::cm {

struct CmServiceConfig {
  std::string socket_path;   // the worker's host socket + ".cm"
  bool world_accessible = false;  // 0666, with may_attach deciding per application
  // Whether a peer (credentials from SO_PEERCRED) may use the vNIC (0: all the port's). nullptr: anyone.
  std::function<bool(uid_t, gid_t, uint32_t vnic_ip)> may_attach;
};

struct CmServiceCounters {
  uint64_t clients = 0, refused = 0, bad_requests = 0, events = 0, events_dropped = 0, ring_full = 0;
};

inline std::string cm_socket_path(const std::string& host_socket) { return host_socket + ".cm"; }

class CmService {
 public:
  CmService(CmServiceConfig c, CmEngine& engine, GsiRings* rings);
  ~CmService();
  CmService(const CmService&) = delete;
  CmService& operator=(const CmService&) = delete;

  // One round; `timeout_ms` caps the wait for socket activity (0: none).
  void serve(uint64_t now, int timeout_ms);
  // The engine's next timer, for the caller's wait.
  uint64_t next_deadline() const noexcept { return next_deadline_; }
  const CmServiceCounters& counters() const noexcept { return k_; }
  CmEngine& engine() noexcept { return e_; }
  int epoll_fd() const noexcept { return ep_; }

 private:
  struct Client {
    uint32_t id = 0;
    int fd = -1;
    uint64_t token = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    bool hello = false;
    std::unordered_map<uint32_t, int> channels;  // channel -> event connection fd
  };
  void accept_all();
  void on_readable(int fd, uint64_t now);
  void close_fd(int fd, uint64_t now);
  void handle(Client& c, const CmRequest& r, uint64_t now);
  void flush();

  CmServiceConfig c_;
  CmEngine& e_;
  GsiRings* rings_;
  int listen_fd_ = -1;
  int ep_ = -1;
  uint32_t next_client_ = 1;
  uint64_t token_seed_ = 0;
  std::unordered_map<uint32_t, Client> clients_;
  std::unordered_map<int, uint32_t> fd_client_;   // command connections
  std::unordered_map<int, std::pair<uint32_t, uint32_t>> fd_channel_;  // event connections: client, channel
  std::vector<int> pending_;  // connections that have not said hello yet
  uint64_t next_deadline_ = UINT64_MAX;
  CmServiceCounters k_;
};

}  // namespace tandem::rnic::cm
