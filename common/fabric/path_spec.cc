#include "common/fabric/path_spec.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

namespace tandem::common {

namespace {
double number(std::string_view key, std::string_view v) {
  double d = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  if (ec != std::errc() || ptr != v.data() + v.size() || !std::isfinite(d) || d < 0)
    throw std::invalid_argument("path spec: '" + std::string(key) + "' needs a non-negative number, got '" +
                                std::string(v) + "'");
  return d;
}
uint64_t u64(double d) { return static_cast<uint64_t>(std::llround(d)); }
}  // namespace

PathConfig parse_path_spec(std::string_view spec, PathConfig c) {
  while (!spec.empty()) {
    const auto comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    if (item == "down") { c.up = false; continue; }
    if (item == "up") { c.up = true; continue; }
    const auto eq = item.find('=');
    if (eq == std::string_view::npos)
      throw std::invalid_argument("path spec: '" + std::string(item) + "' is not key=value, up or down");
    const auto key = item.substr(0, eq);
    const double v = number(key, item.substr(eq + 1));
    if (key == "delay_us") c.delay_ns = u64(v * 1e3);
    else if (key == "delay_ns") c.delay_ns = u64(v);
    else if (key == "jitter_us") c.jitter_ns = u64(v * 1e3);
    else if (key == "jitter_ns") c.jitter_ns = u64(v);
    else if (key == "loss") {
      if (v > 1.0) throw std::invalid_argument("path spec: loss must be within 0..1");
      c.loss = v;
    } else if (key == "rate_gbps") c.rate_bps = u64(v * 1e9);
    else if (key == "rate_mbps") c.rate_bps = u64(v * 1e6);
    else if (key == "queue_kb") c.queue_limit_bytes = u64(v * 1024);
    else if (key == "queue_bytes") c.queue_limit_bytes = u64(v);
    else if (key == "ecn_kb") c.ecn_threshold_bytes = u64(v * 1024);
    else if (key == "ecn_bytes") c.ecn_threshold_bytes = u64(v);
    else throw std::invalid_argument("path spec: unknown key '" + std::string(key) + "'");
  }
  return c;
}

std::string format_path_spec(const PathConfig& c) {
  std::string s = "delay_ns=" + std::to_string(c.delay_ns) + ",jitter_ns=" + std::to_string(c.jitter_ns) +
                  ",loss=" + std::to_string(c.loss) + ",rate_mbps=" + std::to_string(c.rate_bps / 1'000'000) +
                  ",queue_bytes=" + std::to_string(c.queue_limit_bytes) +
                  ",ecn_bytes=" + std::to_string(c.ecn_threshold_bytes) + (c.up ? ",up" : ",down");
  return s;
}

}  // namespace tandem::common
