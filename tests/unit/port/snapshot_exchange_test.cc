// SnapshotExchange: readers on other threads get whole snapshots the writer
// made for them, never one it is rewriting, and never wait forever.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "rnic/port/snapshot_exchange.h"

using tandem::rnic::port::SnapshotExchange;

namespace {
struct Rows {
  std::vector<uint64_t> v = std::vector<uint64_t>(4096);
};
}  // namespace

TEST_CASE("a reader is answered only after the writer publishes, with what it wrote") {
  SnapshotExchange<Rows> x;
  CHECK_FALSE(x.wanted());
  {
    SnapshotExchange<Rows>::Reader r(x);
    CHECK(x.wanted());
    CHECK_FALSE(r.ready());  // no lcore answered: the caller's timeout decides
    x.buffer().v[0] = 7;
    x.publish();
    CHECK_FALSE(x.wanted());
    REQUIRE(r.ready());
    CHECK(r.data().v[0] == 7);
  }
  CHECK_FALSE(x.wanted());  // an idle exchange asks nothing of the writer
}

TEST_CASE("a reader that gave up does not let the next one read a stale or half-written buffer") {
  SnapshotExchange<Rows> x;
  { SnapshotExchange<Rows>::Reader gave_up(x); }
  SnapshotExchange<Rows>::Reader r(x);
  CHECK_FALSE(r.ready());
  x.publish();
  CHECK(r.ready());
}

TEST_CASE("concurrent readers always see a whole snapshot while the writer keeps changing its state") {
  SnapshotExchange<Rows> x;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> answered{0}, torn{0};
  std::thread writer([&] {
    uint64_t gen = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      ++gen;  // the "fast path" state changes all the time
      if (x.wanted()) {
        for (uint64_t& e : x.buffer().v) e = gen;
        x.publish();
      }
    }
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t)
    readers.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        SnapshotExchange<Rows>::Reader r(x);
        while (!r.ready()) std::this_thread::yield();
        const auto& v = r.data().v;
        for (uint64_t e : v)
          if (e != v[0]) {
            ++torn;
            break;
          }
        ++answered;
      }
    });
  for (auto& t : readers) t.join();
  stop = true;
  writer.join();
  CHECK(answered == 900);
  CHECK(torn == 0);
}
