// A payload of 16 to 64 bytes (a small WRITE's) copied as two overlapping
// fixed-size moves: a library memcpy's alignment test and size ladder cost
// more than the copy at this size. Shared by the TX encapsulation and the
// responder's placement.
#pragma once

#include <cstdint>
#include <cstring>

namespace tandem::common {

// False for other sizes: the caller copies them its own way.
[[gnu::always_inline]] inline bool copy_16_to_64(uint8_t* dst, const uint8_t* src, uint32_t n) noexcept {
  if (n >= 32 && n <= 64) {
    std::memcpy(dst, src, 32);
    std::memcpy(dst + n - 32, src + n - 32, 32);
    return true;
  }
  if (n >= 16 && n < 32) {
    std::memcpy(dst, src, 16);
    std::memcpy(dst + n - 16, src + n - 16, 16);
    return true;
  }
  return false;
}

}  // namespace tandem::common
