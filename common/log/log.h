// The process's logger (spdlog): one named logger per process writing to
// stderr as "<time> <level> <process>: <message>", set up once by main()
// (init) from --log-level. Diagnostics only: a tool's result (tables, JSON,
// --stats-json, exit counters) stays on stdout. A data lcore never calls it:
// it hands lines to its control thread through a LogRing (log_ring.h).
#pragma once

#include <spdlog/logger.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace tandem::common::log {

using Level = spdlog::level::level_enum;

// "trace|debug|info|warn|error|off" (what --log-level accepts); nullopt otherwise.
std::optional<Level> parse_level(std::string_view name);
inline constexpr const char* kLevelNames = "trace|debug|info|warn|error|off";

// Names the process's logger and sets its level. Before init (unit tests,
// libraries used alone) lines go to stderr under "tandem" at info.
void init(std::string_view process, Level level = Level::info);
void set_level(Level level);
spdlog::logger& logger();

template <typename... A>
void trace(spdlog::format_string_t<A...> f, A&&... a) { logger().trace(f, std::forward<A>(a)...); }
template <typename... A>
void debug(spdlog::format_string_t<A...> f, A&&... a) { logger().debug(f, std::forward<A>(a)...); }
template <typename... A>
void info(spdlog::format_string_t<A...> f, A&&... a) { logger().info(f, std::forward<A>(a)...); }
template <typename... A>
void warn(spdlog::format_string_t<A...> f, A&&... a) { logger().warn(f, std::forward<A>(a)...); }
template <typename... A>
void error(spdlog::format_string_t<A...> f, A&&... a) { logger().error(f, std::forward<A>(a)...); }

}  // namespace tandem::common::log
