#include "common/trace/trace_rule.h"

#include <charconv>
#include <stdexcept>

#include "common/wire/ipv4_text.h"

namespace tandem::common::trace {
namespace {

uint64_t num(std::string_view v, std::string_view field) {
  int base = 10;
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
    v.remove_prefix(2);
    base = 16;
  }
  uint64_t x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x, base);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty())
    throw std::invalid_argument(std::string(field) + ": not a number");
  return x;
}

}  // namespace

std::optional<Rule> parse_rule(std::string_view text) {
  if (text == "off" || text.empty()) return std::nullopt;
  Rule r;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    std::string_view kv = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const std::size_t eq = kv.find('=');
    if (eq == std::string_view::npos) throw std::invalid_argument("want key=value, got '" + std::string(kv) + "'");
    const std::string_view k = kv.substr(0, eq);
    std::string_view v = kv.substr(eq + 1);
    if (k == "a") {
      r.ip_a = parse_ipv4(std::string(v));
    } else if (k == "b") {
      r.ip_b = parse_ipv4(std::string(v));
    } else if (k == "pkey") {
      r.pkey = static_cast<uint16_t>(num(v, k));
    } else if (k == "count") {
      r.count = num(v, k);
    } else if (k == "ms") {
      r.ms = num(v, k);
    } else if (k == "qpns") {
      while (!v.empty()) {
        const std::size_t colon = v.find(':');
        if (r.n_qpns == Rule::kMaxQpns)
          throw std::invalid_argument("qpns: at most " + std::to_string(Rule::kMaxQpns));
        r.qpns[r.n_qpns++] = static_cast<uint32_t>(num(v.substr(0, colon), k)) & 0xFFFFFF;
        v = colon == std::string_view::npos ? std::string_view{} : v.substr(colon + 1);
      }
    } else {
      throw std::invalid_argument("unknown field '" + std::string(k) + "' (a, b, qpns, pkey, count, ms)");
    }
  }
  return r;
}

std::string format_rule(const Rule& r) {
  std::string s;
  auto add = [&](const std::string& kv) { s += (s.empty() ? "" : ",") + kv; };
  if (r.ip_a) add("a=" + format_ipv4(r.ip_a));
  if (r.ip_b) add("b=" + format_ipv4(r.ip_b));
  if (r.pkey) add("pkey=" + std::to_string(r.pkey));
  if (r.n_qpns) {
    std::string q;
    for (uint32_t i = 0; i < r.n_qpns; ++i) q += (i ? ":" : "") + std::to_string(r.qpns[i]);
    add("qpns=" + q);
  }
  if (r.count) add("count=" + std::to_string(r.count));
  if (r.ms) add("ms=" + std::to_string(r.ms));
  return s;
}

}  // namespace tandem::common::trace
