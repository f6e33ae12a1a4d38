// Seeded randomness for the simulator: std::mt19937_64 (its output sequence
// is fixed by the standard) with distributions written here, because the
// std:: distributions differ between standard libraries and would break
// bit-for-bit reproducibility.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace tandem::rnic::sim {

class Rng {
 public:
  explicit Rng(uint64_t seed) noexcept : gen_(seed) {}

  uint64_t next() noexcept { return gen_(); }

  // Uniform in [0, n) without modulo bias (Lemire's multiply-and-reject).
  uint64_t below(uint64_t n) noexcept {
    if (n == 0) return 0;
    unsigned __int128 m = static_cast<unsigned __int128>(gen_()) * n;
    auto low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(gen_()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform in [lo, hi] (inclusive).
  uint64_t between(uint64_t lo, uint64_t hi) noexcept { return hi <= lo ? lo : lo + below(hi - lo + 1); }

  // Uniform double in [0, 1) from the top 53 bits.
  double unit() noexcept { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

  bool chance(double p) noexcept { return p > 0 && unit() < p; }

  double exponential(double mean) noexcept { return -mean * std::log1p(-unit()); }

  // Fisher-Yates with below(), so a permutation is portable too.
  template <class T>
  void shuffle(T* data, std::size_t n) noexcept {
    for (std::size_t i = n; i > 1; --i) {
      std::size_t j = below(i);
      std::swap(data[i - 1], data[j]);
    }
  }

 private:
  std::mt19937_64 gen_;
};

// Derives independent seeds for sub-streams (one per link, per host, ...)
// from the run seed, so adding a link does not shift every other stream.
constexpr uint64_t derive_seed(uint64_t seed, uint64_t stream) noexcept {
  uint64_t x = seed ^ (stream * 0x9E3779B97F4A7C15ull) ^ 0xD1B54A32D192ED03ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace tandem::rnic::sim
