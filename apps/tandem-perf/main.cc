// tandem-perf: perftest for a Tandem RNIC. Flags -> Options -> rnic/perf run();
// `tandem-perf sink ...`: receiving QPs for replayed traffic (rnic/perf/sink_run.h).
#include <cstring>
#include <exception>

#include "common/log/log.h"
#include "rnic/perf/perf_options.h"
#include "rnic/perf/perf_run.h"
#include "rnic/perf/sink_options.h"
#include "rnic/perf/sink_run.h"

namespace perf = tandem::rnic::perf;

int main(int argc, char** argv) {
  namespace log = tandem::common::log;
  log::init("tandem-perf");  // parse errors are logged too; --log-level applies from then on
  int code = 0;
  try {
    if (argc > 1 && std::strcmp(argv[1], "sink") == 0) {
      auto sink = perf::parse_sink_args(argc, argv, &code);
      if (!sink) return code;
      log::set_level(log::parse_level(sink->log_level).value_or(log::Level::info));
      return perf::run_sink(*sink);
    }
    auto options = perf::parse_args(argc, argv, &code);
    if (!options) return code;
    log::set_level(log::parse_level(options->log_level).value_or(log::Level::info));
    return perf::run(*options);
  } catch (const std::exception& e) {
    log::error("{}", e.what());
    return 1;
  }
}
