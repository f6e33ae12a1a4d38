// Protocol version negotiation between the DPU agent and an RNIC: each side
// speaks a range of versions; HELLO picks the highest one both speak, so an
// agent and an RNIC one release apart keep working during a rollout.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "common/channel/messages.h"

namespace tandem::common {

struct VersionRange {
  uint16_t oldest = kProtocolVersionOldest;
  uint16_t current = kProtocolVersionCurrent;

  constexpr bool valid() const noexcept { return oldest != 0 && oldest <= current; }
  constexpr bool contains(uint16_t v) const noexcept { return v >= oldest && v <= current; }
};

inline constexpr VersionRange kOurVersions{kProtocolVersionOldest, kProtocolVersionCurrent};

// Highest version in both ranges, or nullopt if they do not overlap or either
// range is malformed (oldest 0 or oldest > current).
constexpr std::optional<uint16_t> negotiate_version(VersionRange a, VersionRange b) noexcept {
  if (!a.valid() || !b.valid()) return std::nullopt;
  uint16_t hi = std::min(a.current, b.current);
  uint16_t lo = std::max(a.oldest, b.oldest);
  if (hi < lo) return std::nullopt;
  return hi;
}

// Features by negotiated version.
constexpr bool has_digest_reconcile(uint16_t version) noexcept {
  return version >= kProtocolVersionDigest;
}
// Whether EntryKind::kVnic entries may travel on a channel at this version.
constexpr bool has_vnic_entries(uint16_t version) noexcept {
  return version >= kProtocolVersionVnic;
}
// Whether a vNIC entry may carry a partition key (VnicAction::pkey != 0).
constexpr bool has_partition_keys(uint16_t version) noexcept {
  return version >= kProtocolVersionPkey;
}

}  // namespace tandem::common
