// ECMP path selection as a leaf-spine switch does it: a hash of the 5-tuple
// (including the UDP source port, which RoCEv2 senders use as entropy) picks
// one of N equal-cost next hops. Shared by tandem-sim and tandem-fabric so a
// source port maps to the same path index in both.
#pragma once

#include <cstdint>

namespace tandem::common {

struct FiveTuple {
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint16_t sport = 0;
  uint16_t dport = 0;
  uint8_t proto = 17;
};

// The tuple's part of the hash input, and the hash from it: a forwarder that
// sees a frame at many switches (tandem-sim) computes the key once.
constexpr uint64_t ecmp_key(const FiveTuple& t) noexcept {
  uint64_t x = (uint64_t{t.src_ip} << 32) ^ t.dst_ip;
  return x ^ (uint64_t{t.sport} << 48) ^ (uint64_t{t.dport} << 32) ^ (uint64_t{t.proto} << 24);
}

// A 64-bit mix (splitmix64 finaliser) of the tuple and a per-switch seed, so
// two switches with different seeds hash independently (no polarisation).
constexpr uint32_t ecmp_hash_key(uint64_t key, uint32_t seed = 0) noexcept {
  uint64_t x = key ^ seed;
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<uint32_t>(x);
}

constexpr uint32_t ecmp_hash(const FiveTuple& t, uint32_t seed = 0) noexcept {
  return ecmp_hash_key(ecmp_key(t), seed);
}

constexpr uint32_t ecmp_pick(const FiveTuple& t, uint32_t n_paths, uint32_t seed = 0) noexcept {
  return n_paths == 0 ? 0 : ecmp_hash(t, seed) % n_paths;
}

}  // namespace tandem::common
