// What the simulated applications do: which host pairs exchange messages
// (bulk, permutation, incast, all-to-all), how large each message is, and the
// byte pattern every message carries so the receiver's memory can be checked.
#pragma once

#include <cstdint>
#include <vector>

#include "rnic/sim/rng.h"
#include "rnic/sim/scenario.h"

namespace tandem::rnic::sim {

struct Flow {
  uint32_t src = 0;
  uint32_t dst = 0;
  uint64_t start_ns = 0;
  std::vector<uint64_t> sizes;  // one per message, posted in order
};

// Draws one message size.
uint64_t sample_size(const SizeDist& d, Rng& rng) noexcept;
// The distribution's mean (a CDF's by the trapezoid rule, unclamped).
double mean_size(const SizeDist& d) noexcept;

// The flows of a workload on a topology of `hosts` hosts, within the
// workload's host range (throws ScenarioError if it does not fit).
// `host_gbps`: the hosts' link rate (poisson's load is a fraction of it).
std::vector<Flow> make_flows(const WorkloadSpec& w, uint32_t hosts, Rng& rng, double host_gbps = 100);

// The byte at `offset` of message `msg` sent by host `src`: a mix of all
// three, so a misplaced, stale or foreign byte shows up as a mismatch.
void fill_pattern(uint8_t* out, uint32_t src, uint64_t msg, uint64_t offset, uint64_t len) noexcept;
// Offset of the first byte that differs from the pattern, or -1.
int64_t check_pattern(const uint8_t* data, uint32_t src, uint64_t msg, uint64_t offset, uint64_t len) noexcept;

}  // namespace tandem::rnic::sim
