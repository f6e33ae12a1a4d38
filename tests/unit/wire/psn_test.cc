#include <catch2/catch.hpp>

#include "common/wire/psn.h"

using namespace tandem::common;

TEST_CASE("psn arithmetic wraps at 2^24") {
  CHECK(psn_add(0xFFFFFF, 1) == 0);
  CHECK(psn_add(0xFFFFFE, 5) == 3);
  CHECK(psn_add(2, -5) == 0xFFFFFD);
}

TEST_CASE("psn distance is signed across the wrap") {
  CHECK(psn_diff(0, 0xFFFFFF) == 1);
  CHECK(psn_diff(0xFFFFFF, 0) == -1);
  CHECK(psn_diff(10, 3) == 7);
  CHECK(psn_diff(3, 10) == -7);
  CHECK(psn_diff(0x7FFFFF, 0) == 0x7FFFFF);
  CHECK(psn_diff(0x800000, 0) == 0x800000);
  CHECK(psn_diff(0x800001, 0) == -0x7FFFFF);
}

TEST_CASE("psn order holds after wrap-around") {
  CHECK(psn_lt(0xFFFFF0, 0x000005));
  CHECK_FALSE(psn_lt(0x000005, 0xFFFFF0));
  CHECK(psn_le(7, 7));
  CHECK_FALSE(psn_lt(7, 7));
}
