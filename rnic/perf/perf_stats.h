// Measurements of a tandem-perf run: bandwidth (average and the best 10 ms
// window, as perftest's "BW peak") and latency percentiles. Time comes in as
// `now` (ns); nothing here reads a clock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tandem::rnic::perf {

class BwMeter {
 public:
  static constexpr uint64_t kWindowNs = 10'000'000;

  void start(uint64_t now) noexcept {
    start_ = window_start_ = last_ = now;
  }
  // `bytes` more completed at `now`.
  void add(uint64_t now, uint64_t bytes, uint64_t messages) noexcept {
    bytes_ += bytes;
    messages_ += messages;
    window_bytes_ += bytes;
    last_ = now;
    if (now - window_start_ >= kWindowNs) {
      double g = gbps(window_bytes_, now - window_start_);
      if (g > peak_) peak_ = g;
      window_start_ = now;
      window_bytes_ = 0;
    }
  }
  uint64_t bytes() const noexcept { return bytes_; }
  uint64_t messages() const noexcept { return messages_; }
  uint64_t elapsed_ns() const noexcept { return last_ - start_; }
  double avg_gbps() const noexcept { return gbps(bytes_, last_ - start_); }
  // Best window: the full 10 ms ones and the trailing one if it lasted at
  // least a millisecond; never below the average (a run shorter than a
  // window, or with a slow start, reports at least its average).
  double peak_gbps() const noexcept {
    double p = peak_;
    if (last_ - window_start_ >= kWindowNs / 10) p = std::max(p, gbps(window_bytes_, last_ - window_start_));
    return std::max(p, avg_gbps());
  }
  double msg_rate_mpps() const noexcept {
    return last_ > start_ ? static_cast<double>(messages_) * 1e3 / static_cast<double>(last_ - start_) : 0;
  }
  static double gbps(uint64_t bytes, uint64_t ns) noexcept {
    return ns ? static_cast<double>(bytes) * 8.0 / static_cast<double>(ns) : 0;
  }

 private:
  uint64_t start_ = 0, window_start_ = 0, last_ = 0;
  uint64_t bytes_ = 0, messages_ = 0, window_bytes_ = 0;
  double peak_ = 0;
};

struct LatencySummary {
  uint64_t samples = 0;
  double t_min_us = 0, t_max_us = 0, t_typical_us = 0, t_avg_us = 0, t_stdev_us = 0;
  double t_99_us = 0, t_999_us = 0;
};

// Summary of one-way latencies in ns (the samples are sorted in place).
// typical is the median, as perftest's t_typical.
LatencySummary summarize_latency(std::vector<uint64_t>& samples_ns);

}  // namespace tandem::rnic::perf
