// One request in flight (ib_read_lat, ib_atomic_lat, ib_write_lat) over a
// 16-path set while a quarter of the paths are dead in each direction, as
// the lab's 16 source ports fall on 4 fabric paths and one fabric path fails.
// A lost response costs the requester a timeout and a retry; the responder's
// answer to that retry must go on a path that answers. Before, a retried READ
// (and a replayed atomic) was answered like a new request: when a dead path
// was due for a probe, the answer was that probe, and once the requester's
// backed-off timeout outlasted the probe interval every answer was a probe
// of the dead path until retry_cnt ran out (IBV_WC_RETRY_EXC_ERR; issue 33).
#include <catch2/catch.hpp>

#include <cstring>

#include "tests/unit/core/loop.h"

using namespace tandem::rnic;
using namespace tandem::rnic::test;
using tandem::common::DropReason;

namespace {

constexpr uint32_t kAtomicAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                   IBV_ACCESS_REMOTE_ATOMIC;

struct DeadQuarter {
  uint64_t dropped_requests = 0, dropped_responses = 0;
};

// A's packets on source ports with (port & 3) == 0 and B's with (port & 3) == 1
// die from `from_ns` on; the path health on both sides must find them.
void kill_quarter(Loop& l, DeadQuarter& d, uint64_t from_ns) {
  l.filter = [&l, &d, from_ns](bool from_a, const tandem::common::RocePacket& p) {
    if (l.now < from_ns || (p.udp.sport & 3) != (from_a ? 0 : 1)) return true;
    ++(from_a ? d.dropped_requests : d.dropped_responses);
    return false;
  };
}

QpSetup lat_setup() {
  QpSetup s;
  s.path = "round_robin";
  s.num_paths = 16;
  s.timeout_ns = 67'108'864;  // perftest's qp_timeout 14
  s.access = kAtomicAccess;
  return s;
}

// Posts `n` WRs one at a time (the next when the last completed); returns
// the longest time one took.
template <class MakeWr>
uint64_t one_in_flight(Loop& l, uint32_t n, MakeWr make) {
  uint64_t worst = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t t0 = l.now;
    REQUIRE(l.send(l.a, make(i)) == 0);
    REQUIRE(l.run([&] { return l.a.done.size() == i + 1; }));
    REQUIRE(l.a.done.back().status == IBV_WC_SUCCESS);
    worst = std::max(worst, l.now - t0);
  }
  return worst;
}

}  // namespace

TEST_CASE("one READ in flight with a quarter of the paths dead: a retried READ is answered on a path that answers") {
  Loop l(1 << 20, lat_setup());
  REQUIRE(l.ok);
  DeadQuarter d;
  kill_quarter(l, d, 200'000);
  for (uint32_t i = 0; i < 4096; ++i) l.b.mem[i] = static_cast<uint8_t>(i * 7 + 3);
  const uint64_t worst = one_in_flight(l, 3000, [&](uint32_t i) {
    return make_wr(IBV_WR_RDMA_READ, i, l.a, 64 * (i % 32), 64, &l.b, 64 * (i % 32));
  });
  CHECK(std::memcmp(l.a.mem.data(), l.b.mem.data(), 2048) == 0);
  CHECK(d.dropped_requests > 0);
  CHECK(d.dropped_responses > 0);
  CHECK(l.a.t.qp_state(l.a.qpn) == QpState::kRts);
  // Each loss costs a timeout (RTO_low, 100 us here), a few in a row at
  // worst; never the QP's 67 ms timeout.
  CHECK(worst < 5'000'000);
}

TEST_CASE("one atomic in flight with a quarter of the paths dead: a replayed answer goes on a path that answers") {
  Loop l(1 << 20, lat_setup());
  REQUIRE(l.ok);
  const MemoryRegion rb = l.b.t.reg_mr(l.b.mem.data(), l.b.mem.size(), kAtomicAccess);
  DeadQuarter d;
  kill_quarter(l, d, 200'000);
  const uint64_t worst = one_in_flight(l, 1500, [&](uint32_t i) {
    SendWr wr;
    wr.wr_id = i;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.num_sge = 1;
    wr.sg_list[0] = Sge{l.a.va(8 * (i % 64)), 8, l.a.mr.lkey};
    wr.remote_addr = rb.addr;
    wr.rkey = rb.rkey;
    wr.compare_add = 1;
    return wr;
  });
  uint64_t sum = 0;
  std::memcpy(&sum, l.b.mem.data(), 8);
  CHECK(sum == 1500);  // each executed once, retries answered from the saved value
  CHECK(d.dropped_responses > 0);
  CHECK(l.b.counters().atomic_replays > 0);
  CHECK(worst < 5'000'000);
}

TEST_CASE("one WRITE in flight with a quarter of the paths dead completes every WRITE") {
  Loop l(1 << 20, lat_setup());
  REQUIRE(l.ok);
  DeadQuarter d;
  kill_quarter(l, d, 200'000);
  for (uint32_t i = 0; i < 4096; ++i) l.a.mem[i] = static_cast<uint8_t>(i * 5 + 1);
  const uint64_t worst = one_in_flight(l, 3000, [&](uint32_t i) {
    return make_wr(IBV_WR_RDMA_WRITE, i, l.a, 64 * (i % 32), 64, &l.b, 64 * (i % 32));
  });
  CHECK(std::memcmp(l.a.mem.data(), l.b.mem.data(), 2048) == 0);
  CHECK(d.dropped_requests > 0);
  CHECK(d.dropped_responses > 0);
  CHECK(worst < 5'000'000);
}
