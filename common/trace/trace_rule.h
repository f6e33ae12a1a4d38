// What a process traces: packets between two underlay addresses (either
// direction), optionally only those to some destination QPs (as the wire names
// them) or of one partition. `tandemctl trace start` compiles a tenant's flow
// (VNI and overlay addresses) into this wire-level rule once it knows the
// flow's RNICs and QPs, and hands the same rule to every process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::common::trace {

struct Rule {
  static constexpr uint32_t kMaxQpns = 8;
  uint32_t ip_a = 0, ip_b = 0;  // host order; 0: any address on that side
  uint16_t pkey = 0;            // BTH P_Key; 0: any
  uint32_t qpns[kMaxQpns] = {};
  uint32_t n_qpns = 0;  // 0: any destination QP
  uint64_t count = 0;   // records this process may write (0: no limit but the ring)
  uint64_t ms = 0;      // for this long after it is installed (0: until stopped)

  bool matches(uint32_t src, uint32_t dst, uint32_t dqpn, uint16_t bth_pkey) const noexcept {
    if (!matches_pair(src, dst, bth_pkey)) return false;
    if (n_qpns == 0) return true;
    for (uint32_t i = 0; i < n_qpns; ++i)
      if (qpns[i] == (dqpn & 0xFFFFFF)) return true;
    return false;
  }
  // The addresses and partition alone: whether any packet between `src` and
  // `dst` could match (what a worker compiles into a QP's trace flag).
  bool matches_pair(uint32_t src, uint32_t dst, uint16_t bth_pkey) const noexcept {
    const bool ab = (ip_a == 0 || src == ip_a) && (ip_b == 0 || dst == ip_b);
    const bool ba = (ip_a == 0 || dst == ip_a) && (ip_b == 0 || src == ip_b);
    return (ab || ba) && (pkey == 0 || bth_pkey == pkey);
  }
  // One end alone (the other not known yet, as at a punt): whether packets
  // between `end` and some address could match.
  bool matches_end(uint32_t end, uint16_t bth_pkey) const noexcept {
    const bool near = ip_a == 0 || ip_b == 0 || end == ip_a || end == ip_b;
    return near && (pkey == 0 || bth_pkey == pkey);
  }
};

// "a=10.0.0.1,b=10.0.0.2,qpns=65536:131072,pkey=0x8001,count=1000,ms=5000"
// (every field optional; "off" is no rule). Throws std::invalid_argument with
// the offending field.
std::optional<Rule> parse_rule(std::string_view text);
std::string format_rule(const Rule& r);

}  // namespace tandem::common::trace
