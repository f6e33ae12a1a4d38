// Log lines from a thread that must not make system calls (a data lcore):
// formatted into a fixed ring without a syscall or allocation, logged by
// another thread (drain, the control thread: log_drain.h applies the
// per-key rate limit there). A full ring drops the line and counts it, so a
// tenant that provokes a message in a loop costs the lcore one snprintf per
// line and the log at most the ring's size per drain. Only slow-path events
// (a QP's state change, a refused SRQ or MR) use it: the packet, WQE and
// completion paths count, they never log.
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>

namespace tandem::common {

class LogRing {
 public:
  static constexpr uint32_t kLines = 64;
  static constexpr uint32_t kLineLen = 256;

  enum class Level : uint8_t { kInfo, kWarn };

  // The producer (one thread). `key` groups repeats for the rate limit (the
  // kind of message and the tenant's application). log(): a warning.
  [[gnu::format(printf, 3, 4)]] void log(uint64_t key, const char* fmt, ...) noexcept {
    va_list ap;
    va_start(ap, fmt);
    put(Level::kWarn, key, fmt, ap);
    va_end(ap);
  }
  [[gnu::format(printf, 3, 4)]] void info(uint64_t key, const char* fmt, ...) noexcept {
    va_list ap;
    va_start(ap, fmt);
    put(Level::kInfo, key, fmt, ap);
    va_end(ap);
  }

  // The consumer (one other thread): sink(level, key, line) for each queued line,
  // then dropped(n) for the lines lost to a full ring since the last drain.
  // Returns the lines drained.
  template <typename Sink, typename Dropped>
  uint32_t drain(Sink&& sink, Dropped&& dropped) {
    uint32_t h = head_.load(std::memory_order_relaxed);
    const uint32_t t = tail_.load(std::memory_order_acquire);
    const uint32_t n = t - h;
    for (; h != t; ++h) {
      const Line& l = lines_[h % kLines];
      sink(l.level, l.key, static_cast<const char*>(l.text));
    }
    head_.store(h, std::memory_order_release);
    const uint64_t d = dropped_.load(std::memory_order_relaxed);
    if (d != reported_) {
      dropped(d - reported_);
      reported_ = d;
    }
    return n;
  }
  uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Line {
    uint64_t key;
    Level level;
    char text[kLineLen];
  };
  void put(Level level, uint64_t key, const char* fmt, va_list ap) noexcept {
    const uint32_t t = tail_.load(std::memory_order_relaxed);
    if (t - head_.load(std::memory_order_acquire) >= kLines) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    Line& l = lines_[t % kLines];
    std::vsnprintf(l.text, kLineLen, fmt, ap);
    l.key = key;
    l.level = level;
    tail_.store(t + 1, std::memory_order_release);
  }
  alignas(64) std::atomic<uint32_t> head_{0};
  alignas(64) std::atomic<uint32_t> tail_{0};
  std::atomic<uint64_t> dropped_{0};
  uint64_t reported_ = 0;  // consumer's
  Line lines_[kLines];
};

}  // namespace tandem::common
