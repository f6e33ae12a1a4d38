// How receiver-driven credits ride on ACKs: the AETH credit field.
//
// An ACK's AETH syndrome is 0b0_00_CCCCC: the 5-bit credit count (IBA table
// "end-to-end flow control credit encoding", logarithmic, 31 = invalid) that
// plain RC uses for receive WQEs and Tandem otherwise leaves at 31. A QP whose
// CC policy uses credits (cc "credit") sets it on every ACK and SACK
// (RC_ACKNOWLEDGE and RC_ATOMIC_ACKNOWLEDGE) to the number of new packets the
// requester may send past the ACK's PSN + 1: the grant limit is
//     limit_psn = ack_psn + 1 + credit_decode(code).
// The responder rounds down (never grants more than it meant), the requester
// keeps the highest limit it has seen (ACKs may arrive reordered), so the
// field is absolute and a lost ACK loses no credit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace tandem::rnic {

inline constexpr uint8_t kCreditInvalid = 31;
inline constexpr std::array<uint32_t, 31> kCreditTable = {
    0,    1,    2,    3,    4,    6,    8,     12,    16,    24,    32,
    48,   64,   96,   128,  192,  256,  384,   512,   768,   1024,  1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768};

// Largest code whose value is <= credits.
constexpr uint8_t credit_encode(uint32_t credits) noexcept {
  uint8_t c = 0;
  while (static_cast<std::size_t>(c) + 1 < kCreditTable.size() && kCreditTable[c + 1] <= credits) ++c;
  return c;
}

constexpr uint32_t credit_decode(uint8_t code) noexcept {
  return code < kCreditTable.size() ? kCreditTable[code] : 0;
}

}  // namespace tandem::rnic
