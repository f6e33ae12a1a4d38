// LogRing: lines keep their key and order; a full ring counts what it drops.
#include "common/log/log_ring.h"

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

TEST_CASE("a LogRing hands lines and keys over in order and counts what a full ring dropped") {
  static tandem::common::LogRing ring;  // 13 KB: not on the test's stack
  for (uint32_t i = 0; i < tandem::common::LogRing::kLines + 3; ++i) ring.log(i % 2, "line %u", i);
  std::vector<std::pair<uint64_t, std::string>> got;
  uint64_t lost = 0;
  auto keep = [&](tandem::common::LogRing::Level, uint64_t k, const char* s) { got.emplace_back(k, s); };
  const uint32_t n = ring.drain(keep, [&](uint64_t d) { lost += d; });
  CHECK(n == tandem::common::LogRing::kLines);
  CHECK(lost == 3);
  REQUIRE(got.size() == tandem::common::LogRing::kLines);
  CHECK(got[0] == std::pair<uint64_t, std::string>{0, "line 0"});
  CHECK(got[5] == std::pair<uint64_t, std::string>{1, "line 5"});
  // Drained: room again, and the drop count is not reported twice.
  ring.log(9, "again");
  got.clear();
  lost = 0;
  ring.drain(keep, [&](uint64_t d) { lost += d; });
  CHECK(got.size() == 1);
  CHECK(lost == 0);
}

#include <spdlog/sinks/ostream_sink.h>

#include <memory>
#include <sstream>

#include "common/log/log_drain.h"

TEST_CASE("drained lines are rate-limited per key: one tenant's storm is cut, another's line goes out") {
  using namespace tandem::common;
  constexpr uint64_t kSec = 1'000'000'000ULL;
  static LogRing ring;
  std::ostringstream text;
  spdlog::logger out("t", std::make_shared<spdlog::sinks::ostream_sink_st>(text));
  out.set_pattern("%l %v");
  log::RateLimiter limit(5, kSec);
  for (int i = 0; i < 40; ++i) ring.log(0x100000001ULL, "QP 0x%x: no route", i);
  ring.info(0x100000002ULL, "another tenant's QP");
  log::drain_ring(ring, limit, 10 * kSec, out);
  std::string s = text.str();
  auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
  };
  CHECK(count(": no route") == 5);
  CHECK(count("info another tenant's QP") == 1);
  CHECK(count("suppressed") == 0);  // not before its window is over
  // A second later the storm's tail is reported once, with its count.
  text.str("");
  log::drain_ring(ring, limit, 11 * kSec, out);
  s = text.str();
  CHECK(count("suppressed 35 similar messages (key 0x100000001)") == 1);
}
