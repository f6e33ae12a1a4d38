// Per-vNIC punt budgets (rnic/port/punt_budget.h): a storm from one vNIC is
// held to its rate and counted for it, and another vNIC punts meanwhile.
#include <catch2/catch.hpp>

#include <vector>

#include "rnic/port/punt_budget.h"

using tandem::rnic::port::PuntBudget;

namespace {

constexpr uint64_t kMs = 1'000'000;

PuntBudget::Row row_of(const PuntBudget& b, uint32_t vnic) {
  std::vector<PuntBudget::Row> rows(PuntBudget::kBuckets);
  rows.resize(b.rows(rows));
  for (const PuntBudget::Row& r : rows)
    if (r.vnic_id == vnic) return r;
  return {};
}

}  // namespace

TEST_CASE("a vNIC punts its burst at once, then one per 1/rate; the rest are refused and counted") {
  PuntBudget b({.rate_per_s = 1000, .burst = 16});
  const uint64_t t0 = 5'000 * kMs;
  int admitted = 0;
  for (int i = 0; i < 100; ++i) admitted += b.admit(7, t0);
  CHECK(admitted == 16);
  CHECK_FALSE(b.admit(7, t0 + kMs / 2));  // half a token
  CHECK(b.admit(7, t0 + kMs));            // one token after 1 ms
  CHECK_FALSE(b.admit(7, t0 + kMs));
  const PuntBudget::Row r = row_of(b, 7);
  CHECK(r.admitted == 17);
  CHECK(r.refused == 84 + 2);
  CHECK(b.refused_total() == 86);
}

TEST_CASE("another vNIC punts while one storms") {
  PuntBudget b({.rate_per_s = 1000, .burst = 8});
  uint64_t now = kMs;
  int victim = 0;
  for (int i = 0; i < 100'000; ++i) {  // the attacker: 100 punts per ms for 1 s
    b.admit(1, now);
    if (i % 100 == 0) victim += b.admit(2, now);  // the victim: one new flow per ms
    now += 10'000;
  }
  CHECK(victim == 1000);
  const PuntBudget::Row a = row_of(b, 1);
  // Held to burst + rate x 1 s, whatever it tried.
  CHECK(a.admitted >= 1000);
  CHECK(a.admitted <= 1000 + 8 + 1);
  CHECK(a.refused == 100'000 - a.admitted);
  CHECK(row_of(b, 2).refused == 0);
}

TEST_CASE("a quiet vNIC refills to its burst only") {
  PuntBudget b({.rate_per_s = 100, .burst = 4});
  for (int i = 0; i < 4; ++i) REQUIRE(b.admit(3, kMs));
  CHECK_FALSE(b.admit(3, kMs));
  int again = 0;
  for (int i = 0; i < 10; ++i) again += b.admit(3, 10'000 * kMs);  // 10 s later
  CHECK(again == 4);
}

TEST_CASE("rate 0 admits every punt; vNICs past the table share one counted bucket") {
  PuntBudget none({.rate_per_s = 0, .burst = 1});
  for (int i = 0; i < 1000; ++i) REQUIRE(none.admit(1, kMs));
  CHECK(none.refused_total() == 0);

  PuntBudget b({.rate_per_s = 1000, .burst = 1});
  for (uint32_t v = 1; v <= 600; ++v) b.admit(v, kMs);
  for (uint32_t v = 1; v <= 600; ++v) b.admit(v, kMs);  // each vNIC's second punt at once
  std::vector<PuntBudget::Row> rows(PuntBudget::kBuckets);
  rows.resize(b.rows(rows));
  uint64_t admitted = 0, refused = 0;
  for (const PuntBudget::Row& r : rows) {
    admitted += r.admitted;
    refused += r.refused;
  }
  CHECK(admitted + refused == 1200);
  CHECK(rows.size() <= PuntBudget::kBuckets);
  CHECK(row_of(b, PuntBudget::kOverflowId).refused > 0);  // the overflow bucket is shared, and counted
}

TEST_CASE("a vNIC keeps its bucket index, and different vNICs get different ones") {
  PuntBudget b;
  const uint32_t i1 = b.index_of(1, kMs), i2 = b.index_of(2, kMs);
  CHECK(i1 != i2);
  CHECK(b.index_of(1, 2 * kMs) == i1);
  CHECK(i1 < PuntBudget::kBuckets);
  CHECK(b.admit_at(i1, 2 * kMs));
  CHECK(row_of(b, 1).admitted == 1);
}
