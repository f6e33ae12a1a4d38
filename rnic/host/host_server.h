// Worker side of the host interface, one per port lcore: accepts tenant
// applications on a Unix socket, maps their registered memory and queue
// rings, and hands the worker loop validated work (WQEs with SGEs translated
// to worker pointers) and a way back (completions). Two halves, each its own
// class and files, one owner thread each (rnic/host/README.md "Two halves"):
//   ControlServer (control_server.h): sockets, attach, memfd/mmap, device
//     mappings, handles, PD/CQ/SRQ references, fair shares: the control thread.
//   FastPath (fast_path.h): doorbells, WQE fetches, completions, events: the
//     data lcore.
// They meet only in the link (host_link.h): the control-message queue and its
// answers. HostServer owns both; the worker gives the lcore its FastPath and
// the control thread its ControlServer. poll(now) runs both on one thread
// (tests, simple loops).
#pragma once

#include <cstdint>

#include "rnic/host/control_server.h"
#include "rnic/host/fast_path.h"
#include "rnic/host/server_types.h"

namespace tandem::rnic::host {

class HostServer : public ControlServer, public FastPath {
 public:
  // Binds and listens (ControlServer). Throws std::runtime_error on failure.
  explicit HostServer(const ServerConfig& config);

  // One thread does everything: apply_control(now) then serve_control(now, 0),
  // each control message applied at once. Never blocks.
  void poll(uint64_t now);

  // Both halves' tables: the thread that runs poll() (or with both halves quiet).
  HostMemory memory() const noexcept;
};

}  // namespace tandem::rnic::host
