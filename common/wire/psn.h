// 24-bit packet sequence numbers: arithmetic and ordering modulo 2^24.
#pragma once

#include <cstdint>

namespace tandem::common {

inline constexpr uint32_t kPsnMask = 0xFFFFFF;
inline constexpr uint32_t kPsnHalf = 0x800000;

constexpr uint32_t psn_add(uint32_t psn, int64_t delta) noexcept {
  return static_cast<uint32_t>(static_cast<int64_t>(psn) + delta) & kPsnMask;
}

// Signed distance b - a in (-2^23, 2^23]: positive when b is after a.
constexpr int32_t psn_diff(uint32_t b, uint32_t a) noexcept {
  int32_t d = static_cast<int32_t>((b - a) & kPsnMask);
  return d > static_cast<int32_t>(kPsnHalf) ? d - static_cast<int32_t>(kPsnMask + 1) : d;
}

constexpr bool psn_lt(uint32_t a, uint32_t b) noexcept { return psn_diff(b, a) > 0; }
constexpr bool psn_le(uint32_t a, uint32_t b) noexcept { return psn_diff(b, a) >= 0; }

}  // namespace tandem::common
