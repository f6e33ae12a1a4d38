// tandem-sim's entry: the RNIC simulator's run (rnic/sim/run.h) with the DPU
// model (dpu_gate.h) for scenarios with a dpu: section. This library is the
// one place that links both rnic/ and dpu/ (docs/architecture.md, "The
// simulator's layers").
#pragma once

#include <ostream>

#include "rnic/sim/run.h"

namespace tandem::sim {

// Exit codes as rnic::sim::run's.
int run(const rnic::sim::RunOptions& opt, std::ostream& out, std::ostream& err);

}  // namespace tandem::sim
