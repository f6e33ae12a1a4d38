#include "rnic/core/policy_factory.h"

#include <cstring>

#include "rnic/core/cc_credit.h"
#include "rnic/core/cc_dcqcn.h"
#include "rnic/core/cc_fixed_window.h"
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

std::unique_ptr<CcPolicy> make_cc_policy(const char* name) {
  if (name == nullptr) return nullptr;
  if (std::strcmp(name, "fixed_window") == 0) return std::make_unique<CcFixedWindow>();
  if (std::strcmp(name, "credit") == 0) return std::make_unique<CcCredit>();
  if (std::strcmp(name, "dcqcn") == 0) return std::make_unique<CcDcqcn>();
  return nullptr;
}

}  // namespace tandem::rnic
