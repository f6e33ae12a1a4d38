#include "common/wire/ipv4_text.h"

#include <arpa/inet.h>

#include <stdexcept>

namespace tandem::common {

uint32_t parse_ipv4(const std::string& text) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1)
    throw std::invalid_argument("not an IPv4 address: '" + text + "'");
  return ntohl(a.s_addr);
}

std::string format_ipv4(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 0xFF) + "." +
         std::to_string((ip >> 8) & 0xFF) + "." + std::to_string(ip & 0xFF);
}

}  // namespace tandem::common
