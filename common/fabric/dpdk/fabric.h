// tandem-fabric's engine: one DPDK primary with a port per attached host,
// forwarding by underlay destination IPv4, spreading over K impaired paths
// by the ECMP hash of the 5-tuple, releasing held packets by TSC.
#pragma once

#include "common/fabric/dpdk/fabric_config.h"

namespace tandem::common::fabric {

// Initialises the EAL from c.eal_args, sets up every probed port, forwards
// until SIGINT/SIGTERM (or c.duration_s), prints the counters and returns
// the process exit code. Throws std::runtime_error on start-up errors.
int run(const FabricConfig& c);

}  // namespace tandem::common::fabric
