// UDP source-port entropy for RoCEv2: the fabric's ECMP hash sees the source
// port, so a "path" is a value in 0xC000-0xFFFF (the range RoCEv2 reserves).
#pragma once

#include <cstdint>

namespace tandem::common {

inline constexpr uint16_t kRoceUdpPort = 4791;
inline constexpr uint16_t kEntropyPortBase = 0xC000;
inline constexpr uint16_t kEntropyPortCount = 0x4000;

constexpr uint16_t entropy_port(uint32_t value) noexcept {
  return static_cast<uint16_t>(kEntropyPortBase | (value & (kEntropyPortCount - 1)));
}

constexpr bool is_entropy_port(uint16_t port) noexcept { return port >= kEntropyPortBase; }

}  // namespace tandem::common
