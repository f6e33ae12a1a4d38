// A seeded, deterministic random generator (xoshiro256**, seeded through
// splitmix64) for loss and jitter decisions: the same seed gives the same
// drops in the simulator, the lab fabric and the tests, on any platform.
#pragma once

#include <cstdint>

namespace tandem::common {

class Rng {
 public:
  explicit constexpr Rng(uint64_t seed = 1) noexcept { reseed(seed); }

  constexpr void reseed(uint64_t seed) noexcept {
    uint64_t x = seed;
    for (auto& s : s_) s = splitmix64(x);
  }

  constexpr uint64_t next() noexcept {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n) without modulo bias worth caring about (Lemire's
  // multiply-shift; the bias is below 2^-64 * n).
  constexpr uint64_t below(uint64_t n) noexcept {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }

  // True with probability threshold / 2^64; see probability_threshold().
  constexpr bool chance(uint64_t threshold) noexcept { return next() < threshold; }

  // Uniform double in [0, 1) with 53 random bits.
  constexpr double uniform01() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static constexpr uint64_t rotl(uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  static constexpr uint64_t splitmix64(uint64_t& x) noexcept {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  uint64_t s_[4]{};
};

// A probability as a 64-bit threshold for Rng::chance(), so the per-packet
// test is one compare. p <= 0 never fires; p >= 1 always fires.
constexpr uint64_t probability_threshold(double p) noexcept {
  if (!(p > 0.0)) return 0;
  if (p >= 1.0) return UINT64_MAX;
  return static_cast<uint64_t>(p * 18446744073709551616.0);
}

}  // namespace tandem::common
