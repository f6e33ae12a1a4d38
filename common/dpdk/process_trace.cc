#include "common/dpdk/process_trace.h"

#include <rte_eal.h>

#include <stdexcept>

#include "common/dpdk/telemetry.h"
#include "common/log/log.h"

namespace tandem::common::dpdk {

std::shared_ptr<ProcessTrace> open_process_trace(const std::string& process, const TscClock& clock, uint64_t capacity,
                                                 const std::string& file) {
  auto t = std::make_shared<ProcessTrace>();
  t->path = std::string(rte_eal_get_runtime_dir()) + "/" + file;
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

void register_trace_telemetry(const std::string& cmd, std::vector<std::shared_ptr<ProcessTrace>> units) {
  telemetry_register(cmd, "Trace rule: ',a=IP,b=IP,qpns=Q:Q,pkey=P,count=N,ms=M' installs, ',off' stops",
                     [units](std::string_view params, TelemetryDict& out) {
                       if (units.empty()) return 0;
                       const ProcessTrace& first = *units.front();
                       uint64_t bytes = 0, running = 0, written = 0;
                       std::string rule;
                       for (const auto& t : units) {
                         std::lock_guard<std::mutex> g(t->mu);
                         if (!params.empty()) {
                           try {
                             trace_request(*t, params);
                           } catch (const std::exception& e) {
                             out.str("error", e.what());
                             return 0;
                           }
                         }
                         if (rule.empty()) rule = t->last_rule;
                         bytes += t->ring ? t->ring->bytes() : 0;
                         running |= t->tracer.running();
                         written += t->tracer.written();
                       }
                       if (!params.empty()) out.str("requested", rule);
                       out.str("ring", first.ring ? first.path : "");
                       out.u64("rings", units.size());  // one per lcore: the others beside the first
                       out.u64("ring_bytes", bytes);
                       out.u64("capacity", first.ring ? first.ring->header()->capacity : 0);
                       out.str("rule", rule);
                       out.u64("running", running);
                       out.u64("written", written);
                       return 0;
                     });
}

}  // namespace tandem::common::dpdk
