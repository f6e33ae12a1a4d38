#include "common/log/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <memory>
#include <mutex>

namespace tandem::common::log {
namespace {

// "2026-12-06T17:30:00.123 warning tandem-dpu: ...": the old "<process>: ..."
// text stays a substring of every line, so greps of the old messages still match.
constexpr const char* kPattern = "%Y-%m-%dT%H:%M:%S.%e %l %n: %v";

std::shared_ptr<spdlog::logger> make(std::string name, Level level) {
  auto l = std::make_shared<spdlog::logger>(std::move(name), std::make_shared<spdlog::sinks::stderr_sink_mt>());
  l->set_pattern(kPattern);
  l->set_level(level);
  l->flush_on(Level::trace);  // a line is on stderr before the next one (tests read it while we run)
  return l;
}

std::mutex g_mutex;
std::shared_ptr<spdlog::logger> g_logger;  // replaced only by init(), before the process's threads

}  // namespace

std::optional<Level> parse_level(std::string_view n) {
  if (n == "trace") return Level::trace;
  if (n == "debug") return Level::debug;
  if (n == "info") return Level::info;
  if (n == "warn") return Level::warn;
  if (n == "error") return Level::err;
  if (n == "off") return Level::off;
  return std::nullopt;
}

void init(std::string_view process, Level level) {
  std::lock_guard<std::mutex> g(g_mutex);
  g_logger = make(std::string(process), level);
}

void set_level(Level level) { logger().set_level(level); }

spdlog::logger& logger() {
  // Once: a logger exists from the first call on (init() may replace it before the threads start).
  static const bool made = [] {
    std::lock_guard<std::mutex> g(g_mutex);
    if (!g_logger) g_logger = make("tandem", Level::info);
    return true;
  }();
  (void)made;
  return *g_logger;
}

}  // namespace tandem::common::log
