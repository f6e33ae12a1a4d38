// What may stand between a connection and its first message. In Pegasus a
// QP's RNIC needs a level-2 route to the peer before it sends (a miss is
// punted to the DPU agent and installed by a transaction): sim/ (the DPU in
// the loop) implements a gate with the agent's own code, which rnic/sim may
// not include; the simulator knows only this interface.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "rnic/sim/event_queue.h"

namespace tandem::rnic::sim {

struct Conn;
class Simulation;

class ConnGate {
 public:
  virtual ~ConnGate() = default;
  // Connection `c` wants to start at `now`. True: it starts now. False:
  // the gate calls Simulation::release(c.index, when) once it may.
  virtual bool admit(const Conn& c, uint64_t now) = 0;
  // An event of kind kDpu (scheduled with Simulation::schedule_gate).
  virtual void on_event(const Event& e) = 0;
  // Nothing of the gate's own is left to do (no waiting connections): the
  // run may end when the workload is done.
  virtual bool idle() const noexcept { return true; }
  // Whether hosts ask egress_ok for every packet they send.
  virtual bool checks_egress() const noexcept { return false; }
  // A started connection's packet leaves host `host` from its QP `qpn`:
  // false drops it (its route is gone: the real worker drops it as a table
  // miss and punts; the transport retransmits later).
  virtual bool egress_ok(uint32_t /*host*/, uint32_t /*qpn*/, uint64_t /*now*/) { return true; }
  // The gate's figures for the run's result: a JSON object ("" for none).
  virtual std::string report_json() const { return {}; }
};

// Builds a run's gate (after the simulation has its fabric and connections).
using GateFactory = std::function<std::unique_ptr<ConnGate>(Simulation&)>;

}  // namespace tandem::rnic::sim
