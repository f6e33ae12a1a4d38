// ECN congestion marking as a switch does it: set CE in the IPv4 TOS of an
// ECN-capable packet and patch the header checksum incrementally (RFC 1624).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::common {

enum class EcnMark : uint8_t {
  kMarked,     // was ECT(0)/ECT(1), now CE
  kAlreadyCe,  // left as is
  kNotEct,     // not ECN-capable: a marking switch leaves it (or drops it)
  kNotIpv4,    // too short or not version 4: left untouched
};

// `ip` points at the IPv4 header, `avail` bytes are readable and writable.
EcnMark mark_ce_ipv4(uint8_t* ip, std::size_t avail) noexcept;

}  // namespace tandem::common
