// Handles and keys the host server hands out, made by the control half and
// checked by both. QPN, CQ, PD and SRQ handles: generation (1..255) << 16 |
// slot; generation 0 is never used, so a QPN is never 0 or 1 (the special
// QPs of InfiniBand). lkey == rkey == slot << 8 | generation.
#pragma once

#include <cstdint>

namespace tandem::rnic::host {

constexpr uint32_t make_handle(uint8_t gen, uint32_t index) noexcept { return (uint32_t{gen} << 16) | index; }
constexpr uint32_t handle_index(uint32_t h) noexcept { return h & 0xFFFF; }
constexpr uint8_t handle_gen(uint32_t h) noexcept { return static_cast<uint8_t>(h >> 16); }
constexpr uint32_t make_key(uint8_t gen, uint32_t index) noexcept { return index << 8 | gen; }
constexpr uint8_t next_gen(uint8_t g) noexcept { return g == 255 ? 1 : static_cast<uint8_t>(g + 1); }

}  // namespace tandem::rnic::host
