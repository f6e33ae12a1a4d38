// Name -> policy instance. Adding a spraying or congestion-control policy is
// one new file plus one line in policy_factory.cc.
#pragma once

#include <memory>

#include "rnic/core/cc_policy.h"
#include "rnic/core/path_policy.h"

namespace tandem::rnic {

// nullptr if the name is unknown. Called at QP creation only. A congestion
// control policy may be tuned in its name: "dcqcn:alpha_us=1,increase_us=300"
// (numbers; nullptr if the policy does not know a key or a value is bad).
std::unique_ptr<PathPolicy> make_path_policy(const char* name);
std::unique_ptr<CcPolicy> make_cc_policy(const char* name);

}  // namespace tandem::rnic
