// HPCC's FCT-slowdown experiment in unit size (built-in scenario hpcc-unit:
// a 16-host fat-tree, ~360 Poisson web-search flows, DCQCN+w and HPCC with
// HPCC's run.py parameters, seed 1) against its golden summary. The full
// size, against the published curves, is scripts/bench.sh sim-hpcc.
//
// The golden values are this run's own (Tandem's DCQCN, HPCC and core as of
// the commit that added them). A deliberate change to the transport or a
// policy moves them: re-run `tandem-sim run hpcc-unit` and update the table
// if the new numbers are explained.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "rnic/sim/run.h"
#include "rnic/sim/simulation.h"

using namespace tandem::rnic::sim;

namespace {

struct Golden {
  const char* policy;
  double p50[10];
  double p95[10];
};

// Per 10 % bucket of the flows by size (716 B .. 3 MB).
constexpr Golden kGolden[] = {
    {"dcqcn",
     {1.02, 1.03, 1.03, 1.07, 1.08, 1.08, 1.31, 1.45, 1.74, 1.63},
     {3.84, 2.76, 3.42, 5.56, 2.72, 2.66, 3.55, 2.75, 3.14, 2.88}},
    {"hpcc",
     {1.03, 1.03, 1.04, 1.08, 1.08, 1.07, 1.25, 1.51, 1.84, 1.76},
     {1.78, 2.05, 2.64, 3.14, 1.97, 3.34, 3.66, 2.97, 2.88, 3.78}},
};

double geomean(const double* v, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += std::log(v[i]);
  return std::exp(s / static_cast<double>(n));
}

}  // namespace

TEST_CASE("hpcc-unit: the FCT slowdown of DCQCN+w and HPCC matches the golden summary") {
  const Scenario s = resolve_scenario("hpcc-unit");
  const std::vector<RunResult> rs = run_scenario(s, s.seed);
  REQUIRE(rs.size() == 2);
  double small_p95[2] = {0, 0};
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const RunResult& r = rs[i];
    const Golden& g = kGolden[i];
    INFO("policy " << r.policy);
    REQUIRE(r.policy == g.policy);
    CHECK(r.data_ok);
    CHECK(r.messages == 361);
    CHECK(r.drops == 0);
    REQUIRE(r.slowdown.size() == 10);
    double p50[10], p95[10];
    for (std::size_t k = 0; k < 10; ++k) {
      p50[k] = r.slowdown[k].p50;
      p95[k] = r.slowdown[k].p95;
      std::printf("hpcc-unit %-5s bucket %zu <= %8llu B: p50 %.2f (golden %.2f) p95 %.2f (golden %.2f)\n",
                  r.policy.c_str(), k, static_cast<unsigned long long>(r.slowdown[k].max_bytes), p50[k], g.p50[k],
                  p95[k], g.p95[k]);
      CHECK(p50[k] == Approx(g.p50[k]).margin(0.03));
      CHECK(p95[k] == Approx(g.p95[k]).margin(0.03));
    }
    small_p95[i] = geomean(p95, 6);
  }
  // What HPCC is for: short flows barely queue (the first 60 % of the flows).
  CHECK(small_p95[1] < 0.8 * small_p95[0]);
  // HPCC reacts to INT alone and keeps the queues shorter (DCQCN's RED
  // marks from 400 kB per 100 Gb/s: this small run hardly reaches it).
  CHECK(rs[1].cnps == 0);
  CHECK(rs[1].ecn_marks == 0);
  CHECK(rs[1].rate_cuts > 0);
  CHECK(rs[1].max_queue_bytes < rs[0].max_queue_bytes);
}
