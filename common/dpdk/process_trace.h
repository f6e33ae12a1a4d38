// A DPDK process's trace unit plumbing (common/trace): its ring file in the
// EAL runtime directory (<runtime dir>/tandem-trace.ring, found by tandemctl
// next to the telemetry socket and removed with the directory), its Tracer
// (owned by the data lcore, which calls tracer.poll(now) once per loop
// iteration), and the telemetry command that installs, stops and reports
// rules: "<cmd>" status, "<cmd>,off" stop, "<cmd>,a=IP,b=IP,qpns=Q:Q,count=N,ms=M".
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/dpdk/tsc_clock.h"
#include "common/trace/trace_file.h"
#include "common/trace/tracer.h"

namespace tandem::common::dpdk {

struct ProcessTrace {
  trace::Tracer tracer;
  std::unique_ptr<trace::RingFile> ring;
  std::string path;
  std::mutex mu;                   // telemetry clients run on threads of their own
  std::string last_rule = "off";  // as last requested
};

// Creates the ring (after rte_eal_init) for records stamped with `clock`
// (the ring names its TSC base and rate, so readers convert them exactly).
// On failure tracing stays off and the reason goes to stderr. `file`: the
// ring's name in the runtime directory (trace::lcore_ring_name(k) for lcore
// k of a process whose lcores each trace).
std::shared_ptr<ProcessTrace> open_process_trace(const std::string& process, const TscClock& clock,
                                                 uint64_t capacity = trace::kDefaultCapacity,
                                                 const std::string& file = trace::kRingFileName);

// One command for a process's trace units (one per lcore): a rule or a stop
// goes to each; the reply names lcore 0's ring and sums the others'.
void register_trace_telemetry(const std::string& cmd, std::vector<std::shared_ptr<ProcessTrace>> units);
inline void register_trace_telemetry(const std::string& cmd, std::shared_ptr<ProcessTrace> t) {
  register_trace_telemetry(cmd, std::vector<std::shared_ptr<ProcessTrace>>{std::move(t)});
}

// What the telemetry command does with its parameters (a rule, or "off"), for
// a process that also takes rules another way (the agent's control socket).
// Call with t.mu held; throws std::invalid_argument or std::runtime_error.
void trace_request(ProcessTrace& t, std::string_view rule);

}  // namespace tandem::common::dpdk
