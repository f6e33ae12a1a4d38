#include "rnic/perf/pattern.h"

#include <cstring>

namespace tandem::rnic::perf {

void fill_pattern(std::span<uint8_t> buf, uint32_t qp, uint64_t iteration) noexcept {
  uint64_t base = mix64((uint64_t{qp} << 40) ^ mix64(iteration));
  std::size_t words = buf.size() / 8;
  uint8_t* p = buf.data();
  for (std::size_t w = 0; w < words; ++w) {
    uint64_t v = mix64(base + w);
    std::memcpy(p + 8 * w, &v, 8);  // little endian: byte k of v is offset 8w+k
  }
  for (std::size_t off = words * 8; off < buf.size(); ++off)
    p[off] = pattern_byte(qp, iteration, off);
}

std::size_t find_mismatch(std::span<const uint8_t> buf, uint32_t qp, uint64_t iteration) noexcept {
  uint64_t base = mix64((uint64_t{qp} << 40) ^ mix64(iteration));
  std::size_t words = buf.size() / 8;
  const uint8_t* p = buf.data();
  for (std::size_t w = 0; w < words; ++w) {
    uint64_t want = mix64(base + w);
    uint64_t got;
    std::memcpy(&got, p + 8 * w, 8);
    if (got != want) {
      for (std::size_t k = 0; k < 8; ++k)
        if (p[8 * w + k] != static_cast<uint8_t>(want >> (8 * k))) return 8 * w + k;
    }
  }
  for (std::size_t off = words * 8; off < buf.size(); ++off)
    if (p[off] != pattern_byte(qp, iteration, off)) return off;
  return kNoMismatch;
}

}  // namespace tandem::rnic::perf
