// Text forms of IPv4 and MAC addresses for the control plane (tandemctl,
// bulk import, error messages). Parsing is strict: "10.0.0.1", "02:00:00:00:00:01".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/wire/headers.h"

namespace tandem::dpu {

using common::MacAddr;

std::optional<uint32_t> parse_ipv4(std::string_view s) noexcept;  // host order
std::optional<MacAddr> parse_mac(std::string_view s) noexcept;
std::string format_ipv4(uint32_t ip);
std::string format_mac(const MacAddr& mac);

}  // namespace tandem::dpu
