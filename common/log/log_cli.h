// --log-level for every app's main.cc (CLI11), so each says the same thing.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "common/log/log.h"

namespace tandem::common::log {

inline CLI::Option* add_level_option(CLI::App& app, std::string& level) {
  return app
      .add_option("--log-level", level,
                  "Diagnostics on stderr at this level and above: trace|debug|info|warn|error|off (default info)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
}

// After parsing: names the process's logger at the level given.
inline void init_from_flag(const char* process, const std::string& level) {
  init(process, parse_level(level).value_or(Level::info));
}

}  // namespace tandem::common::log
