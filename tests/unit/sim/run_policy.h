// The one policy of a scenario named `name`, run once (Catch2 FAIL if it has none).
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "rnic/sim/simulation.h"

namespace tandem::rnic::sim::test {

inline RunResult run_policy(const Scenario& s, const std::string& name) {
  for (const PolicySpec& p : s.policies) {
    if (p.name == name) {
      Simulation sim(s, p, s.seed);
      return sim.run();
    }
  }
  FAIL("no policy " << name);
  return {};
}

}  // namespace tandem::rnic::sim::test
