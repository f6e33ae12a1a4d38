// The per-key rate limit of log lines on an injected clock.
#include "common/log/rate_limiter.h"

#include <catch2/catch.hpp>

#include <map>

using tandem::common::log::RateLimiter;

namespace {
constexpr uint64_t kSec = 1'000'000'000ULL;
}

TEST_CASE("a key gets N lines a window, then its repeats are counted and reported with its next line") {
  RateLimiter r(3, kSec);
  uint64_t now = 5 * kSec;
  for (int i = 0; i < 3; ++i) {
    const auto v = r.admit(7, now + i);
    CHECK(v.emit);
    CHECK(v.suppressed == 0);
  }
  for (int i = 0; i < 10; ++i) CHECK_FALSE(r.admit(7, now + 100 + i).emit);
  CHECK(r.total_suppressed() == 10);
  // Still inside the window: nothing.
  CHECK_FALSE(r.admit(7, now + kSec - 1).emit);
  // The next window: the line goes out with the count of what was held back.
  const auto v = r.admit(7, now + kSec);
  CHECK(v.emit);
  CHECK(v.suppressed == 11);
  CHECK(r.admit(7, now + kSec + 1).suppressed == 0);
}

TEST_CASE("one key's storm does not silence another key") {
  RateLimiter r(2, kSec);
  for (int i = 0; i < 1000; ++i) r.admit(1, 10 + i);
  CHECK(r.admit(2, 2000).emit);
  CHECK(r.admit(2, 2001).emit);
  CHECK_FALSE(r.admit(2, 2002).emit);
  CHECK(r.total_suppressed() == 998 + 1);
}

TEST_CASE("expire reports a burst that stopped once its window is over, once") {
  RateLimiter r(1, kSec);
  r.admit(4, 0);
  r.admit(4, 1);
  r.admit(4, 2);
  std::map<uint64_t, uint64_t> got;
  r.expire(kSec - 1, [&](uint64_t k, uint64_t n) { got[k] += n; });
  CHECK(got.empty());  // the window is not over
  r.expire(kSec, [&](uint64_t k, uint64_t n) { got[k] += n; });
  CHECK(got == std::map<uint64_t, uint64_t>{{4, 2}});
  r.expire(3 * kSec, [&](uint64_t k, uint64_t n) { got[k] += n; });
  CHECK(got[4] == 2);
  CHECK(r.admit(4, 3 * kSec).suppressed == 0);  // already reported
}

TEST_CASE("the key table is bounded: quiet keys are forgotten, busy ones share a budget") {
  RateLimiter r(1, kSec, 4);
  for (uint64_t k = 0; k < 4; ++k) CHECK(r.admit(k, 0).emit);
  // Four keys busy in this window: a fifth shares the overflow key's budget.
  CHECK(r.admit(100, 1).emit);
  CHECK_FALSE(r.admit(101, 2).emit);
  CHECK(r.keys() == 5);  // the four and the overflow key
  // A window later the quiet keys make room.
  CHECK(r.admit(102, 2 * kSec).emit);
  CHECK(r.keys() <= 4);
}
