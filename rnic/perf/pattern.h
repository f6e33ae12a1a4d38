// Verification pattern of tandem-perf: every byte a test moves is a function
// of (QP index, iteration, offset), so the receiving side can check each byte
// it was given and name the first one that is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tandem::rnic::perf {

// splitmix64's finaliser: a cheap, well-mixed 64-bit hash.
constexpr uint64_t mix64(uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Byte `offset` of the message of QP index `qp` at iteration `iteration`.
// Computed a 64-bit word at a time (one hash per 8 bytes), so filling and
// checking cost about as much as a memcpy.
constexpr uint8_t pattern_byte(uint32_t qp, uint64_t iteration, uint64_t offset) noexcept {
  uint64_t base = mix64((uint64_t{qp} << 40) ^ mix64(iteration));
  uint64_t word = mix64(base + offset / 8);
  return static_cast<uint8_t>(word >> (8 * (offset % 8)));
}

// Writes the pattern of (qp, iteration) into buf (message offsets 0..size-1).
void fill_pattern(std::span<uint8_t> buf, uint32_t qp, uint64_t iteration) noexcept;

// Where buf first differs from the pattern of (qp, iteration), or kNoMismatch.
inline constexpr std::size_t kNoMismatch = ~std::size_t{0};
std::size_t find_mismatch(std::span<const uint8_t> buf, uint32_t qp, uint64_t iteration) noexcept;

// Latency tests poll the last byte of the buffer for the peer's next message,
// so that byte is a marker that differs between consecutive iterations
// (as perftest's counter byte): marker_byte(i) != marker_byte(i + 1).
constexpr uint8_t marker_byte(uint64_t iteration) noexcept {
  return static_cast<uint8_t>(iteration + 1);
}

}  // namespace tandem::rnic::perf
