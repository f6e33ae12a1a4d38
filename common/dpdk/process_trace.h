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
// On failure tracing stays off and the reason goes to stderr.
std::shared_ptr<ProcessTrace> open_process_trace(const std::string& process, const TscClock& clock,
                                                 uint64_t capacity = trace::kDefaultCapacity);

void register_trace_telemetry(const std::string& cmd, std::shared_ptr<ProcessTrace> t);

// What the telemetry command does with its parameters (a rule, or "off"), for
// a process that also takes rules another way (the agent's control socket).
// Call with t.mu held; throws std::invalid_argument or std::runtime_error.
void trace_request(ProcessTrace& t, std::string_view rule);

}  // namespace tandem::common::dpdk
