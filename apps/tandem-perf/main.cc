// tandem-perf: perftest for a Tandem RNIC. Flags -> Options -> rnic/perf run();
// `tandem-perf sink ...`: receiving QPs for replayed traffic (rnic/perf/sink_run.h).
#include <cstdio>
#include <cstring>
#include <exception>

#include "rnic/perf/perf_options.h"
#include "rnic/perf/perf_run.h"
#include "rnic/perf/sink_options.h"
#include "rnic/perf/sink_run.h"

namespace perf = tandem::rnic::perf;

int main(int argc, char** argv) {
  int code = 0;
  try {
    if (argc > 1 && std::strcmp(argv[1], "sink") == 0) {
      auto sink = perf::parse_sink_args(argc, argv, &code);
      return sink ? perf::run_sink(*sink) : code;
    }
    auto options = perf::parse_args(argc, argv, &code);
    if (!options) return code;
    return perf::run(*options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-perf: %s\n", e.what());
    return 1;
  }
}
