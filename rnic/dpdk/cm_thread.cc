#include "rnic/dpdk/cm_thread.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace tandem::rnic::dpdk {

namespace {

// A vNIC's CA GUID as the drop-in libibverbs gives it: the EUI-64 of its MAC.
uint64_t eui64(const common::MacAddr& m) noexcept {
  return uint64_t{static_cast<uint8_t>(m[0] ^ 2)} << 56 | uint64_t{m[1]} << 48 | uint64_t{m[2]} << 40 |
         uint64_t{0xFF} << 32 | uint64_t{0xFE} << 24 | uint64_t{m[3]} << 16 | uint64_t{m[4]} << 8 | m[5];
}

uint8_t mtu_enum(uint32_t mtu) noexcept {
  switch (mtu) {
    case 256: return 1;
    case 512: return 2;
    case 2048: return 4;
    case 4096: return 5;
    default: return 3;
  }
}

cm::CmConfig engine_config(const WorkerConfig& c) {
  cm::CmConfig e;
  e.response_timeout = c.cm_response_timeout;
  e.max_retries = c.cm_max_retries;
  e.path_mtu = mtu_enum(c.mtu);
  e.comm_id_seed = static_cast<uint32_t>(getpid()) << 12 | 1;  // a restarted worker does not reuse IDs at once
  return e;
}

}  // namespace

CmThread::CmThread(const WorkerConfig& c, const port::PortLogic& port, cm::GsiRings& rings,
                   const common::dpdk::TscClock& clock)
    : c_(c), port_(port), rings_(rings), clock_(clock), engine_(engine_config(c)) {
  cm::CmServiceConfig sc;
  sc.socket_path = cm::cm_socket_path(c.host_socket);
  sc.world_accessible = !c.device_owners.empty();
  if (!c.device_owners.empty()) {
    // The host socket's rule (rnic/host may_attach): root, the worker's user, a vNIC's owners.
    sc.may_attach = [this](uid_t uid, gid_t gid, uint32_t vnic_ip) {
      if (uid == 0 || uid == geteuid()) return true;
      const std::vector<port::Vnic> vnics = port_.vnics();
      const auto admitted = [&](const port::Vnic& v) {
        for (const port::DeviceOwner& o : c_.device_owners)
          if (o.vnic_id == v.id && (o.uid == uid || (o.gid >= 0 && o.gid == static_cast<int64_t>(gid)))) return true;
        return false;
      };
      bool any = false;
      for (const port::Vnic& v : vnics) {
        if (vnic_ip != 0 && v.overlay_ip != vnic_ip) continue;
        if (!admitted(v)) return false;
        any = true;
      }
      return any;
    };
  }
  service_ = std::make_unique<cm::CmService>(std::move(sc), engine_, &rings_);
  refresh_vnics();
  thread_ = std::thread([this] { run(); });
  pthread_setname_np(thread_.native_handle(), "tandem-cm");
}

CmThread::~CmThread() { stop(); }

void CmThread::stop() noexcept {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

void CmThread::refresh_vnics() {
  std::vector<cm::CmVnic> out;
  for (const port::Vnic& v : port_.vnics())
    out.push_back(cm::CmVnic{v.id, v.overlay_ip, common::wire_pkey(v.pkey), v.vni, eui64(v.overlay_mac)});
  engine_.set_vnics(std::move(out));
}

void CmThread::publish() {
  const cm::CmCounters& k = engine_.counters();
  snap_.mads_in.store(k.mads_in, std::memory_order_relaxed);
  snap_.mads_out.store(k.mads_out, std::memory_order_relaxed);
  snap_.bad_mads.store(k.bad_mads, std::memory_order_relaxed);
  snap_.unsolicited.store(k.unsolicited, std::memory_order_relaxed);
  snap_.duplicates.store(k.duplicates, std::memory_order_relaxed);
  snap_.no_listener.store(k.no_listener, std::memory_order_relaxed);
  snap_.tenant_refused.store(k.tenant_refused, std::memory_order_relaxed);
  snap_.no_vnic.store(k.no_vnic, std::memory_order_relaxed);
  snap_.retries.store(k.retries, std::memory_order_relaxed);
  snap_.timeouts.store(k.timeouts, std::memory_order_relaxed);
  snap_.established.store(k.established, std::memory_order_relaxed);
  snap_.rejected_sent.store(k.rejected_sent, std::memory_order_relaxed);
  snap_.rejected_rcvd.store(k.rejected_rcvd, std::memory_order_relaxed);
  snap_.disconnects.store(k.disconnects, std::memory_order_relaxed);
  snap_.connections.store(engine_.connections(), std::memory_order_relaxed);
  snap_.events_dropped.store(service_->counters().events_dropped, std::memory_order_relaxed);
  snap_.ring_full.store(service_->counters().ring_full + rings_.rx_ring_full.load(std::memory_order_relaxed),
                        std::memory_order_relaxed);
}

void CmThread::run() noexcept {
  uint64_t next_vnics = 0;
  uint64_t busy_until = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint64_t now = clock_.now_ns();
    if (now >= next_vnics) {  // DPU mode's vNICs come and go
      refresh_vnics();
      next_vnics = now + 100'000'000;
    }
    const bool busy = now < busy_until;
    const uint64_t deadline = service_->next_deadline();
    int wait_ms = busy ? 0 : 2;
    if (deadline != UINT64_MAX && deadline <= now + 2'000'000) wait_ms = 0;
    const uint64_t before = engine_.counters().mads_in + engine_.counters().mads_out + service_->counters().events;
    // Waits on the sockets (an application's command wakes it at once), then the lcore's ring and the timers.
    service_->serve(now, wait_ms);
    if (engine_.counters().mads_in + engine_.counters().mads_out + service_->counters().events != before)
      busy_until = clock_.now_ns() + 1'000'000'000;
    publish();
    if (wait_ms == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace tandem::rnic::dpdk
