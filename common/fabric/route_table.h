// Underlay IPv4 destination -> output port, as a leaf switch's host routes:
// a small open-addressing table built at start-up and read per packet
// without allocation.
#pragma once

#include "common/wire/ipv4_text.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tandem::common {

class RouteTable {
 public:
  static constexpr int kMiss = -1;

  RouteTable() = default;

  // Throws std::invalid_argument on a duplicate address (start-up only).
  explicit RouteTable(const std::vector<std::pair<uint32_t, uint16_t>>& routes) {
    std::size_t cap = 16;
    while (cap < routes.size() * 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    for (const auto& [ip, port] : routes) {
      std::size_t i = hash(ip) & mask_;
      while (slots_[i].used) {
        if (slots_[i].ip == ip) throw std::invalid_argument("duplicate route for one address");
        i = (i + 1) & mask_;
      }
      slots_[i] = Slot{ip, port, true};
    }
    size_ = routes.size();
  }

  // Port for a host-order IPv4 address, or kMiss.
  int lookup(uint32_t ip) const noexcept {
    if (slots_.empty()) return kMiss;
    for (std::size_t i = hash(ip) & mask_;; i = (i + 1) & mask_) {
      if (!slots_[i].used) return kMiss;
      if (slots_[i].ip == ip) return slots_[i].port;
    }
  }

  std::size_t size() const noexcept { return size_; }

 private:
  struct Slot {
    uint32_t ip = 0;
    uint16_t port = 0;
    bool used = false;
  };
  static std::size_t hash(uint32_t ip) noexcept { return (ip * 0x9E3779B1u) >> 7; }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};


}  // namespace tandem::common
