// tandem-perf's run: attach to the worker, swap QP details with the peer over
// TCP, move the data, check it, print the report. The tool is an application
// (sockets, a clock, busy polling), so unlike the transport core it does I/O.
#pragma once

#include "rnic/perf/perf_options.h"

namespace tandem::rnic::perf {

// Returns the process exit code: 0 ok, 1 the run failed (verify mismatch,
// error completion, peer gone, no progress), 2 no worker at o.device.
int run(const Options& o);

}  // namespace tandem::rnic::perf
