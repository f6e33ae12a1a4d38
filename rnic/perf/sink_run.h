// `tandem-perf sink`: receiving QPs for replayed traffic, their parameters as
// JSON, and the check of what landed in their memory (sink_options.h).
//
// Memory the profiles write (scripts/make_profiles.py --from mirrors this):
//  * QP i's WRITE region (len `size`) is first filled with the complement of
//    pattern_byte(i, 0, offset) (pattern.h), so every byte is afterwards
//    exactly one of written (the pattern), untouched (the complement) or wrong.
//  * Every SEND to QP i carries pattern_byte(i | 2^31, 0, offset) for offsets
//    0..len-1; each receive completion is checked against it and reposted.
#pragma once

#include "rnic/perf/sink_options.h"

namespace tandem::rnic::perf {

inline constexpr uint32_t kSinkSendKey = 1u << 31;  // pattern key of SEND data: qp index | this

// Returns the exit code (0 ok, 1 memory check failed / worker gone, 2 no worker or bad table).
int run_sink(const SinkOptions& o);

}  // namespace tandem::rnic::perf
