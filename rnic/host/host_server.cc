#include "rnic/host/host_server.h"

#include "rnic/host/fast_records.h"
#include "rnic/host/host_link.h"

namespace tandem::rnic::host {

HostServer::HostServer(const ServerConfig& config)
    : ControlServer(config), FastPath(ControlServer::config(), ControlServer::link()) {
  // Single-thread mode until set_threaded(true): the control half applies its messages here.
  link().apply_here = [this](uint64_t now) { return apply_control(now); };
}

void HostServer::poll(uint64_t now) {
  apply_control(now);
  serve_control(now, 0);
}

HostMemory HostServer::memory() const noexcept {
  HostMemory m = ControlServer::memory();
  m.table_bytes += table_bytes();
  m.bytes_per_qp_slot += sizeof(QpSlot);
  return m;
}

}  // namespace tandem::rnic::host
