// `tandemctl trace start|stop|show`: trace units (common/trace) for one
// virtual flow. start compiles the flow (as flow show finds it: both RNICs'
// underlay addresses and the QPs on each end) into one wire-level rule and
// installs it in both workers and the lab fabric over their telemetry
// sockets, remembering which processes it armed in a session file beside the
// agent's socket; show reads those processes' trace rings and merges them
// into per-packet timelines (common/trace/trace_merge.h); stop removes the rule.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "apps/tandemctl/flow_show.h"

namespace tandem::dpu::ctl {

struct TraceArgs {
  FlowShowArgs flow;       // --vni/--src/--dst (start), socket, runtime dir, fabric
  uint32_t qpn = 0;        // start --qpn: only this QP of the source end (and its peer)
  uint64_t count = 0;      // start --count: records per process
  double seconds = 0;      // start --seconds
  bool all = false;        // show --all: every packet's timeline, not only the eventful ones
  std::size_t limit = 20;  // show: timelines printed at most
  std::vector<std::string> prefixes;  // show/stop --prefix: these processes instead of the session's
};

int trace_start(const TraceArgs& a);
int trace_stop(const TraceArgs& a);
int trace_show(const TraceArgs& a);

}  // namespace tandem::dpu::ctl
