// tandem-perf: perftest for a Tandem RNIC. Flags -> Options -> rnic/perf run().
#include <cstdio>
#include <exception>

#include "rnic/perf/perf_options.h"
#include "rnic/perf/perf_run.h"

namespace perf = tandem::rnic::perf;

int main(int argc, char** argv) {
  int code = 0;
  auto options = perf::parse_args(argc, argv, &code);
  if (!options) return code;
  try {
    return perf::run(*options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-perf: %s\n", e.what());
    return 1;
  }
}
