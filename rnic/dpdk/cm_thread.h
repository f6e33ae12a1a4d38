// The worker's connection manager (rnic/cm) on a thread of its own, never the
// lcore: it serves the CM socket (host socket + ".cm") for applications'
// librdmacm, takes the QP1 MADs lcore 0 hands over on a ring, runs the CM
// timers and follows the port's vNICs. The lcore does no system call per
// MAD; this thread polls the ring every 100 us while connections are being
// set up and every 2 ms otherwise (no wake-up write on the lcore).
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "common/dpdk/tsc_clock.h"
#include "rnic/cm/cm_engine.h"
#include "rnic/cm/cm_service.h"
#include "rnic/cm/gsi_ring.h"
#include "rnic/dpdk/worker_config.h"
#include "rnic/port/port_logic.h"

namespace tandem::rnic::dpdk {

class CmThread {
 public:
  // Throws if the socket cannot be made.
  CmThread(const WorkerConfig& c, const port::PortLogic& port, cm::GsiRings& rings,
           const common::dpdk::TscClock& clock);
  ~CmThread();
  CmThread(const CmThread&) = delete;
  CmThread& operator=(const CmThread&) = delete;
  void stop() noexcept;

  // Counter rows (group "cm"): f(group, name, value, help). Any thread (relaxed copies).
  template <class F>
  void visit(F&& f) const {
    const Snap& s = snap_;
    f("cm", "mads_in", s.mads_in.load(), "CM MADs the CM took from the lcore");
    f("cm", "mads_out", s.mads_out.load(), "CM MADs the CM queued for sending (with retries)");
    f("cm", "bad_mads", s.bad_mads.load(), "malformed MADs dropped (bad version, class, method or attribute)");
    f("cm", "unsolicited", s.unsolicited.load(), "MADs for no connection or in the wrong state, dropped");
    f("cm", "duplicates", s.duplicates.load(), "MADs seen before (resent by the peer)");
    f("cm", "no_listener", s.no_listener.load(), "REQs to a port nobody listens on (REJ invalid service ID)");
    f("cm", "tenant_refused", s.tenant_refused.load(), "REQs from another tenant's partition or route (REJ)");
    f("cm", "no_vnic", s.no_vnic.load(), "REQs to an address none of the port's vNICs has (REJ)");
    f("cm", "retries", s.retries.load(), "MADs resent on their timer");
    f("cm", "timeouts", s.timeouts.load(), "connections that gave up waiting (half-open ones included)");
    f("cm", "established", s.established.load(), "connections established");
    f("cm", "rejected_sent", s.rejected_sent.load(), "REJs sent");
    f("cm", "rejected_rcvd", s.rejected_rcvd.load(), "REJs received");
    f("cm", "disconnects", s.disconnects.load(), "connections closed by DREQ/DREP");
    f("cm", "connections", s.connections.load(), "connections the CM holds now (timewait included)");
    f("cm", "events_dropped", s.events_dropped.load(), "events an application's channel could not take");
    f("cm", "ring_full", s.ring_full.load(), "MADs lost on a full ring between the CM and the lcore");
  }

 private:
  void run() noexcept;
  void refresh_vnics();
  struct Snap {
    std::atomic<uint64_t> mads_in{0}, mads_out{0}, bad_mads{0}, unsolicited{0}, duplicates{0}, no_listener{0},
        tenant_refused{0}, no_vnic{0}, retries{0}, timeouts{0}, established{0}, rejected_sent{0}, rejected_rcvd{0},
        disconnects{0}, connections{0}, events_dropped{0}, ring_full{0};
  };
  void publish();

  const WorkerConfig& c_;
  const port::PortLogic& port_;
  cm::GsiRings& rings_;
  const common::dpdk::TscClock& clock_;
  cm::CmEngine engine_;
  std::unique_ptr<cm::CmService> service_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  Snap snap_;
};

}  // namespace tandem::rnic::dpdk
