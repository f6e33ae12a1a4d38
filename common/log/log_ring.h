// Log lines from a thread that must not make system calls (a data lcore):
// formatted into a fixed ring without a syscall or allocation, written out
// by another thread (drain). A full ring drops the line and counts it, so a
// tenant that provokes a message in a loop costs the lcore one snprintf per
// line and the log at most the ring's size per drain.
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>

namespace tandem::common {

class LogRing {
 public:
  static constexpr uint32_t kLines = 64;
  static constexpr uint32_t kLineLen = 200;

  // The producer (one thread).
  [[gnu::format(printf, 2, 3)]] void log(const char* fmt, ...) noexcept {
    const uint32_t t = tail_.load(std::memory_order_relaxed);
    if (t - head_.load(std::memory_order_acquire) >= kLines) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(lines_[t % kLines], kLineLen, fmt, ap);
    va_end(ap);
    tail_.store(t + 1, std::memory_order_release);
  }

  // The consumer (one other thread): writes what is queued to `out`, with a
  // line for what was dropped since the last drain. Returns the lines written.
  uint32_t drain(std::FILE* out) noexcept {
    uint32_t h = head_.load(std::memory_order_relaxed);
    const uint32_t t = tail_.load(std::memory_order_acquire);
    const uint32_t n = t - h;
    for (; h != t; ++h) std::fprintf(out, "%s\n", lines_[h % kLines]);
    head_.store(h, std::memory_order_release);
    const uint64_t d = dropped_.load(std::memory_order_relaxed);
    if (d != reported_) {
      std::fprintf(out, "(%llu log lines dropped: the log ring was full)\n",
                   static_cast<unsigned long long>(d - reported_));
      reported_ = d;
    }
    if (n != 0) std::fflush(out);
    return n;
  }
  uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

 private:
  alignas(64) std::atomic<uint32_t> head_{0};
  alignas(64) std::atomic<uint32_t> tail_{0};
  std::atomic<uint64_t> dropped_{0};
  uint64_t reported_ = 0;  // consumer's
  char lines_[kLines][kLineLen];
};

}  // namespace tandem::common
