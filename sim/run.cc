#include "sim/run.h"

#include "sim/dpu_gate.h"

namespace tandem::sim {

int run(const rnic::sim::RunOptions& opt, std::ostream& out, std::ostream& err) {
  return rnic::sim::run(opt, out, err, dpu_gate_factory());
}

}  // namespace tandem::sim
