// IPv4 addresses as text, host order in and out (the fabric's routes, trace
// rules, tandemctl).
#pragma once

#include <cstdint>
#include <string>

namespace tandem::common {

// "10.0.0.2" -> host-order address; throws std::invalid_argument.
uint32_t parse_ipv4(const std::string& text);
std::string format_ipv4(uint32_t ip);

}  // namespace tandem::common
