// The calendar queue against the binary heap: the same events in the same
// (time, sequence) order, whatever the mix of near, far and same-time events
// and of peeks between pushes.
#include <catch2/catch.hpp>

#include <vector>

#include "rnic/sim/event_queue.h"
#include "rnic/sim/rng.h"

using namespace tandem::rnic::sim;

namespace {

void same_order(uint64_t seed, uint64_t spread_ns, uint32_t n) {
  EventQueue cal;
  HeapEventQueue heap;
  Rng rng(seed);
  uint64_t now = 0;
  uint32_t pushed = 0;
  std::vector<uint64_t> a, b;
  for (uint32_t i = 0; i < 64; ++i) {
    const uint64_t t = rng.below(spread_ns);
    cal.push(t, EventKind::kUser, pushed);
    heap.push(t, EventKind::kUser, pushed++);
  }
  // Plain comparisons per event (Catch's per-assertion cost made this test
  // take seconds, 20 s under ASan); the first difference fails it.
  uint64_t popped = 0;
  while (!heap.empty()) {
    if (cal.size() != heap.size() || cal.top().a != heap.top().a) {  // a peek, then maybe pushes before the pop
      FAIL("size or top differs before pop " << popped << ": " << cal.size() << " vs " << heap.size());
    }
    if (rng.chance(0.2) && pushed < n) {
      const uint64_t t = now + rng.below(4);  // at or right after now: into the bucket being drained
      cal.push(t, EventKind::kUser, pushed);
      heap.push(t, EventKind::kUser, pushed++);
    }
    const Event x = cal.pop(), y = heap.pop();
    if (x.time != y.time || x.a != y.a) {
      FAIL("pop " << popped << ": calendar (" << x.time << ", " << x.a << ") vs heap (" << y.time << ", " << y.a << ")");
    }
    ++popped;
    now = x.time;
    // Each event schedules 0-2 more: mostly soon, sometimes far beyond the ring's year.
    const uint32_t k = static_cast<uint32_t>(rng.below(3));
    for (uint32_t j = 0; j < k && pushed < n; ++j) {
      const uint64_t t = now + (rng.chance(0.05) ? rng.below(100 * spread_ns) : rng.below(spread_ns));
      cal.push(t, EventKind::kUser, pushed);
      heap.push(t, EventKind::kUser, pushed++);
    }
  }
  CHECK(cal.empty());
  CHECK(popped == pushed);
}

}  // namespace

TEST_CASE("the calendar queue pops in the heap's order: dense, sparse and far events") {
  same_order(1, 100, 300'000);         // many events per bucket: the width shrinks
  same_order(2, 10'000'000, 200'000);  // sparse: the width grows, far events cross years
  same_order(3, 5'000, 200'000);
}

TEST_CASE("an event scheduled before what a peek ran ahead to still comes first") {
  EventQueue q;
  q.push(1'000'000, EventKind::kUser, 1);
  CHECK(q.top().a == 1);  // the ring turned to t = 1 ms
  q.push(500, EventKind::kUser, 2);
  q.push(500, EventKind::kUser, 3);
  CHECK(q.pop().a == 2);
  CHECK(q.pop().a == 3);
  CHECK(q.pop().a == 1);
  CHECK(q.empty());
}
