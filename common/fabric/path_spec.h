// Text form of a path's impairments, as typed on a command line or in the
// fabric's YAML: "delay_us=20,jitter_us=5,loss=0.01,rate_gbps=10,queue_kb=64,
// ecn_kb=16,down". Parsed at start-up and by the run-time control command.
#pragma once

#include <string>
#include <string_view>

#include "common/fabric/path_model.h"

namespace tandem::common {

// Applies the comma-separated key=value items of `spec` on top of `base`.
// Keys: delay_us, delay_ns, jitter_us, jitter_ns, loss (0..1), rate_gbps,
// rate_mbps, queue_kb, queue_bytes, ecn_kb, ecn_bytes; bare words up/down.
// Throws std::invalid_argument naming the bad item.
PathConfig parse_path_spec(std::string_view spec, PathConfig base = {});

// The inverse, for logs and telemetry.
std::string format_path_spec(const PathConfig& c);

}  // namespace tandem::common
