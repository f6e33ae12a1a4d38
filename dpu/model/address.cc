// IPv4 / MAC text conversion.
#include "dpu/model/address.h"

#include <cstdio>

namespace tandem::dpu {

std::optional<uint32_t> parse_ipv4(std::string_view s) noexcept {
  uint32_t ip = 0;
  int parts = 0;
  std::size_t i = 0;
  while (parts < 4) {
    if (i >= s.size() || s[i] < '0' || s[i] > '9') return std::nullopt;
    uint32_t v = 0;
    std::size_t digits = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      v = v * 10 + static_cast<uint32_t>(s[i] - '0');
      if (++digits > 3 || v > 255) return std::nullopt;
      ++i;
    }
    ip = (ip << 8) | v;
    if (++parts < 4) {
      if (i >= s.size() || s[i] != '.') return std::nullopt;
      ++i;
    }
  }
  if (i != s.size()) return std::nullopt;
  return ip;
}

std::optional<MacAddr> parse_mac(std::string_view s) noexcept {
  if (s.size() != 17) return std::nullopt;
  MacAddr m{};
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (int b = 0; b < 6; ++b) {
    int hi = hex(s[b * 3]), lo = hex(s[b * 3 + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    if (b < 5 && s[b * 3 + 2] != ':') return std::nullopt;
    m[b] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return m;
}

std::string format_ipv4(uint32_t ip) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255);
  return buf;
}

std::string format_mac(const MacAddr& m) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return buf;
}

}  // namespace tandem::dpu
