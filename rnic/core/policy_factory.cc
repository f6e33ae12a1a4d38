#include "rnic/core/policy_factory.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "rnic/core/cc_credit.h"
#include "rnic/core/cc_dcqcn.h"
#include "rnic/core/cc_fixed_window.h"
#include "rnic/core/cc_hpcc.h"
#include "rnic/core/path_adaptive.h"
#include "rnic/core/path_round_robin.h"
#include "rnic/core/path_single.h"

namespace tandem::rnic {

std::unique_ptr<PathPolicy> make_path_policy(const char* name) {
  if (name == nullptr) return nullptr;
  if (std::strcmp(name, "single") == 0) return std::make_unique<PathSingle>();
  if (std::strcmp(name, "round_robin") == 0) return std::make_unique<PathRoundRobin>();
  if (std::strcmp(name, "adaptive") == 0) return std::make_unique<PathAdaptive>();
  return nullptr;
}

namespace {

std::unique_ptr<CcPolicy> make_cc_named(std::string_view name) {
  if (name == "fixed_window") return std::make_unique<CcFixedWindow>();
  if (name == "credit") return std::make_unique<CcCredit>();
  if (name == "dcqcn") return std::make_unique<CcDcqcn>();
  if (name == "hpcc") return std::make_unique<CcHpcc>();
  return nullptr;
}

}  // namespace

std::unique_ptr<CcPolicy> make_cc_policy(const char* spec) {
  if (spec == nullptr) return nullptr;
  // "name" or "name:key=value,key=value" (numbers): the keys tune the policy.
  const std::string_view s(spec);
  const std::size_t colon = s.find(':');
  auto cc = make_cc_named(s.substr(0, colon));
  if (!cc || colon == std::string_view::npos) return cc;
  std::string_view rest = s.substr(colon + 1);
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view kv = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const std::size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) return nullptr;
    const std::string value(kv.substr(eq + 1));
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size()) return nullptr;
    if (!cc->configure(kv.substr(0, eq), v)) return nullptr;
  }
  return cc;
}

}  // namespace tandem::rnic
