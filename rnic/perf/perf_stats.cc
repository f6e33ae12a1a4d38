#include "rnic/perf/perf_stats.h"

#include <algorithm>
#include <cmath>

namespace tandem::rnic::perf {

LatencySummary summarize_latency(std::vector<uint64_t>& s) {
  LatencySummary r;
  if (s.empty()) return r;
  std::sort(s.begin(), s.end());
  auto us = [](double ns) { return ns / 1000.0; };
  auto pct = [&](double p) {
    auto i = static_cast<std::size_t>(std::ceil(p * static_cast<double>(s.size()))) ;
    i = i == 0 ? 0 : i - 1;
    return us(static_cast<double>(s[std::min(i, s.size() - 1)]));
  };
  double sum = 0;
  for (uint64_t v : s) sum += static_cast<double>(v);
  double mean = sum / static_cast<double>(s.size());
  double var = 0;
  for (uint64_t v : s) var += (static_cast<double>(v) - mean) * (static_cast<double>(v) - mean);
  r.samples = s.size();
  r.t_min_us = us(static_cast<double>(s.front()));
  r.t_max_us = us(static_cast<double>(s.back()));
  r.t_typical_us = pct(0.5);
  r.t_avg_us = us(mean);
  r.t_stdev_us = us(std::sqrt(var / static_cast<double>(s.size())));
  r.t_99_us = pct(0.99);
  r.t_999_us = pct(0.999);
  return r;
}

}  // namespace tandem::rnic::perf
