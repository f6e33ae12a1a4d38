#include <catch2/catch.hpp>

#include "common/fabric/path_model.h"

using namespace tandem::common;

TEST_CASE("a failed path drops everything as path_down and a healed one delivers again") {
  PathModel p({.delay_ns = 1000});
  Rng rng(7);
  p.set_up(false);
  for (int i = 0; i < 10; ++i) REQUIRE(p.admit(100, i, rng).drop == PathDrop::kDown);
  p.set_up(true);
  auto v = p.admit(100, 50, rng);
  REQUIRE(v.drop == PathDrop::kNone);
  REQUIRE(v.deliver_at == 1050);
  REQUIRE(p.counters().drops[static_cast<int>(PathDrop::kDown)] == 10);
  REQUIRE(p.counters().packets == 1);
}

TEST_CASE("random loss is close to the configured rate and repeats with the seed") {
  auto run = [](uint64_t seed) {
    PathModel p({.loss = 0.25});
    Rng rng(seed);
    for (int i = 0; i < 100000; ++i) p.admit(64, i, rng);
    return p.counters();
  };
  auto a = run(42);
  auto b = run(42);
  const double lost = static_cast<double>(a.drops[static_cast<int>(PathDrop::kLoss)]);
  REQUIRE(lost / 100000.0 == Approx(0.25).margin(0.01));
  REQUIRE(a.drops == b.drops);
  REQUIRE(a.packets + a.dropped() == 100000);
}

TEST_CASE("loss 0 never drops and loss 1 always drops") {
  Rng rng(1);
  PathModel none({.loss = 0.0});
  PathModel all({.loss = 1.0});
  for (int i = 0; i < 1000; ++i) {
    REQUIRE(none.admit(64, i, rng).drop == PathDrop::kNone);
    REQUIRE(all.admit(64, i, rng).drop == PathDrop::kLoss);
  }
}

TEST_CASE("a 1 Gb/s path serialises 1500 bytes in 12 us and queues back-to-back packets") {
  PathModel p({.delay_ns = 5000, .rate_bps = 1'000'000'000});
  Rng rng(1);
  auto a = p.admit(1500, 0, rng);
  auto b = p.admit(1500, 0, rng);
  REQUIRE(a.deliver_at == 12000 + 5000);
  REQUIRE(b.deliver_at == 24000 + 5000);
  REQUIRE(p.backlog_bytes(0) == 3000);
  REQUIRE(p.backlog_bytes(12000) == 1500);
  REQUIRE(p.backlog_bytes(30000) == 0);
  // After the link drained, a new packet starts at its own arrival time.
  REQUIRE(p.admit(1500, 100000, rng).deliver_at == 100000 + 12000 + 5000);
}

TEST_CASE("a full queue tail-drops and the backlog peak is recorded") {
  PathModel p({.rate_bps = 1'000'000'000, .queue_limit_bytes = 4500});
  Rng rng(1);
  int accepted = 0, dropped = 0;
  for (int i = 0; i < 10; ++i) {
    auto v = p.admit(1500, 0, rng);
    (v.drop == PathDrop::kNone ? accepted : dropped)++;
    if (v.drop != PathDrop::kNone) REQUIRE(v.drop == PathDrop::kQueueFull);
  }
  REQUIRE(accepted == 3);
  REQUIRE(dropped == 7);
  REQUIRE(p.counters().max_queue_bytes == 4500);
}

TEST_CASE("packets arriving to a backlog at or above the ECN threshold are marked") {
  PathModel p({.rate_bps = 1'000'000'000, .ecn_threshold_bytes = 3000});
  Rng rng(1);
  REQUIRE_FALSE(p.admit(1500, 0, rng).mark_ce);  // backlog 0
  REQUIRE_FALSE(p.admit(1500, 0, rng).mark_ce);  // backlog 1500
  REQUIRE(p.admit(1500, 0, rng).mark_ce);        // backlog 3000
  REQUIRE(p.counters().ecn_marks == 1);
  REQUIRE_FALSE(p.admit(1500, 1'000'000, rng).mark_ce);  // drained
}

TEST_CASE("jitter stays within bounds and never reorders a path") {
  PathModel p({.delay_ns = 10000, .jitter_ns = 5000});
  Rng rng(3);
  uint64_t last = 0;
  bool some_jitter = false;
  for (uint64_t t = 0; t < 2000; ++t) {
    auto v = p.admit(64, t * 100, rng);
    REQUIRE(v.deliver_at >= t * 100 + 10000);
    REQUIRE(v.deliver_at >= last);
    if (v.deliver_at > t * 100 + 10000) some_jitter = true;
    last = v.deliver_at;
  }
  REQUIRE(some_jitter);
}

TEST_CASE("reconfiguring loss at run time takes effect") {
  PathModel p;
  Rng rng(5);
  REQUIRE(p.admit(64, 0, rng).drop == PathDrop::kNone);
  p.set_loss(1.0);
  REQUIRE(p.admit(64, 1, rng).drop == PathDrop::kLoss);
  p.set_loss(0.0);
  REQUIRE(p.admit(64, 2, rng).drop == PathDrop::kNone);
}

#include "common/fabric/path_spec.h"

TEST_CASE("a path spec sets each impairment and round-trips through its text form") {
  auto c = parse_path_spec("delay_us=20,jitter_us=5,loss=0.01,rate_gbps=10,queue_kb=64,ecn_kb=16,down");
  REQUIRE(c.delay_ns == 20000);
  REQUIRE(c.jitter_ns == 5000);
  REQUIRE(c.loss == Approx(0.01));
  REQUIRE(c.rate_bps == 10'000'000'000ull);
  REQUIRE(c.queue_limit_bytes == 65536);
  REQUIRE(c.ecn_threshold_bytes == 16384);
  REQUIRE_FALSE(c.up);
  auto again = parse_path_spec(format_path_spec(c));
  REQUIRE(again.delay_ns == c.delay_ns);
  REQUIRE(again.rate_bps == c.rate_bps);
  REQUIRE(again.up == c.up);
  REQUIRE(parse_path_spec("up", c).up);
  REQUIRE(parse_path_spec("loss=0.5", c).delay_ns == 20000);  // applied on top of the base
}

TEST_CASE("a bad path spec names the offending item") {
  REQUIRE_THROWS_WITH(parse_path_spec("delay_us=abc"), Catch::Contains("delay_us"));
  REQUIRE_THROWS_WITH(parse_path_spec("loss=2"), Catch::Contains("loss"));
  REQUIRE_THROWS_WITH(parse_path_spec("colour=blue"), Catch::Contains("colour"));
  REQUIRE_THROWS_WITH(parse_path_spec("sideways"), Catch::Contains("sideways"));
}
