#include "common/dpdk/process_trace.h"

#include <rte_eal.h>

#include <stdexcept>

#include "common/dpdk/telemetry.h"
#include "common/log/log.h"

namespace tandem::common::dpdk {

std::shared_ptr<ProcessTrace> open_process_trace(const std::string& process, const TscClock& clock, uint64_t capacity) {
  auto t = std::make_shared<ProcessTrace>();
  t->path = std::string(rte_eal_get_runtime_dir()) + "/" + trace::kRingFileName;
  try {
    t->ring = std::make_unique<trace::RingFile>(
        trace::RingFile::create(t->path, capacity, trace::monotonic_raw_offset(clock.now_ns()), process.c_str(),
                                clock.base(), clock.mult()));
    t->tracer.attach(t->ring->header());
  } catch (const std::exception& e) {
    common::log::warn("{}: tracing off: {}", process, e.what());
  }
  return t;
}

void trace_request(ProcessTrace& t, std::string_view rule) {
  if (!t.ring) throw std::runtime_error("this process has no trace ring");
  if (auto r = trace::parse_rule(rule)) {
    t.tracer.request(*r);
    t.last_rule = trace::format_rule(*r);
    if (t.last_rule.empty()) t.last_rule = "all";
  } else {
    t.tracer.stop();
    t.last_rule = "off";
  }
}

void register_trace_telemetry(const std::string& cmd, std::shared_ptr<ProcessTrace> t) {
  telemetry_register(cmd, "Trace rule: ',a=IP,b=IP,qpns=Q:Q,pkey=P,count=N,ms=M' installs, ',off' stops",
                     [t](std::string_view params, TelemetryDict& out) {
                       std::lock_guard<std::mutex> g(t->mu);
                       if (!params.empty()) {
                         try {
                           trace_request(*t, params);
                           out.str("requested", t->last_rule);
                         } catch (const std::exception& e) {
                           out.str("error", e.what());
                           return 0;
                         }
                       }
                       out.str("ring", t->ring ? t->path : "");
                       out.u64("ring_bytes", t->ring ? t->ring->bytes() : 0);
                       out.u64("capacity", t->ring ? t->ring->header()->capacity : 0);
                       out.str("rule", t->last_rule);
                       out.u64("running", t->tracer.running());
                       out.u64("written", t->tracer.written());
                       return 0;
                     });
}

}  // namespace tandem::common::dpdk
