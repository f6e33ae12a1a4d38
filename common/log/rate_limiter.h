// At most `lines` log lines per key per window (default: 5 a second), so one
// tenant repeating a message cannot flood the log or hide another tenant's.
// What a key exceeds is counted; the next line it is allowed (or expire(),
// once its window is over) reports "suppressed K similar messages".
// Sans-I/O: the caller passes the time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>

namespace tandem::common::log {

class RateLimiter {
 public:
  struct Verdict {
    bool emit;            // log this line
    uint64_t suppressed;  // lines of this key dropped before it (report them first)
  };

  explicit RateLimiter(uint32_t lines = 5, uint64_t window_ns = 1'000'000'000ULL, std::size_t max_keys = 4096)
      : lines_(lines), window_ns_(window_ns), max_keys_(max_keys) {}

  Verdict admit(uint64_t key, uint64_t now_ns) {
    if (keys_.size() >= max_keys_ && keys_.find(key) == keys_.end()) forget_quiet(now_ns);
    // Still full (that many keys busy in one window): they share one budget.
    if (keys_.size() >= max_keys_ && keys_.find(key) == keys_.end()) key = kOverflowKey;
    Key& k = keys_[key];
    if (now_ns - k.start_ns >= window_ns_ || k.count == 0) {
      k.start_ns = now_ns;
      k.count = 0;
    }
    if (k.count < lines_) {
      ++k.count;
      const uint64_t s = k.suppressed;
      k.suppressed = 0;
      return {true, s};
    }
    ++k.suppressed;
    ++total_suppressed_;
    return {false, 0};
  }

  // Reports (key, suppressed) for every key whose window is over with lines
  // still unreported, so a burst that stops is not silent about its tail.
  template <typename F>
  void expire(uint64_t now_ns, F&& report) {
    for (auto& [key, k] : keys_)
      if (k.suppressed != 0 && now_ns - k.start_ns >= window_ns_) {
        report(key, k.suppressed);
        k.suppressed = 0;
      }
  }

  uint64_t total_suppressed() const noexcept { return total_suppressed_; }
  std::size_t keys() const noexcept { return keys_.size(); }
  static constexpr uint64_t kOverflowKey = ~0ULL;

 private:
  struct Key {
    uint64_t start_ns = 0;
    uint32_t count = 0;
    uint64_t suppressed = 0;
  };
  void forget_quiet(uint64_t now_ns) {
    for (auto it = keys_.begin(); it != keys_.end();)
      it = (it->second.suppressed == 0 && now_ns - it->second.start_ns >= window_ns_) ? keys_.erase(it) : ++it;
  }

  uint32_t lines_;
  uint64_t window_ns_;
  std::size_t max_keys_;
  std::unordered_map<uint64_t, Key> keys_;
  uint64_t total_suppressed_ = 0;
};

}  // namespace tandem::common::log
