// QP1 through the port layer (rnic/port/port_gsi.cc) on the fake I/O: two
// ports' lcores hand CM MADs to two CM engines (rnic/cm) over the rings and
// send theirs, so a REQ/REP/RTU handshake and an address probe cross real
// frames; a QP1 datagram with another Q_Key is dropped before the CM.
#include <catch2/catch.hpp>

#include <rdma/rdma_cma.h>

#include <vector>

#include "rnic/cm/cm_engine.h"
#include "tests/unit/port/port_harness.h"

using namespace tandem::rnic;
using namespace tandem::rnic::port;
using namespace tandem::rnic::port::test;
using tandem::common::DropReason;

namespace {

// One side's CM: the engine and the rings its port's lcore reads and writes.
struct Cm {
  explicit Cm(uint32_t overlay, uint32_t seed) : e(cfg(seed)) {
    e.set_vnics({cm::CmVnic{kVnic, overlay, 0xFFFF, 0, seed}});
    e.add_client(1, 0);
  }
  static cm::CmConfig cfg(uint32_t seed) {
    cm::CmConfig c;
    c.comm_id_seed = seed;
    return c;
  }
  // The service's round without sockets: MADs out to the lcore, the lcore's in, timers.
  void round(uint64_t now) {
    for (const cm::GsiOut& o : e.mads_out()) REQUIRE(rings.out.push(o));
    e.mads_out().clear();
    cm::GsiIn in;
    while (rings.in.pop(&in)) {
      if (in.kind == cm::GsiIn::kRoute) {
        e.on_route(in.probe, in.route_underlay);
        continue;
      }
      cm::MadSource s;
      s.underlay = in.src_underlay;
      s.pkey = in.pkey;
      s.has_vni = in.has_vni;
      s.vni = in.vni;
      s.req_vnic = in.req_vnic;
      s.req_route_underlay = in.req_route_underlay;
      e.on_mad(s, in.mad, now);
    }
    e.tick(now);
    for (auto& ev : e.events_out()) events.push_back(ev.msg);
    e.events_out().clear();
  }
  bool has(uint32_t type) const {
    for (const auto& m : events)
      if (m.event == type) return true;
    return false;
  }
  cm::GsiRings rings;
  cm::CmEngine e;
  std::vector<cm::CmEventMsg> events;
};

}  // namespace

TEST_CASE("port layer QP1: a CM handshake and an address probe cross the ports' lcores") {
  // The CM sides first: the pair (its lcore thread reads their rings) is destroyed, and
  // stopped, before them (ASan once caught the thread on a ring out of scope).
  Cm ca(Pair::kOverlayA, 1), cb(Pair::kOverlayB, 1000);
  Pair p;
  p.with([&] {
    p.a.pw->set_gsi(&ca.rings);
    p.b.pw->set_gsi(&cb.rings);
  });
  auto rounds = [&](auto&& done) {
    for (int i = 0; i < 20000 && !done(); ++i) {
      const uint64_t now = p.with([&] { return p.now; });
      ca.round(now);
      cb.round(now);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return done();
  };
  cm::CmRequest r;
  r.remote_ip = Pair::kOverlayB;
  r.cookie = 9;
  REQUIRE(ca.e.resolve(1, r, 0) == 0);
  r.remote_ip = 0x08080808;
  REQUIRE(ca.e.resolve(1, r, 0) == 0);
  REQUIRE(rounds([&] { return ca.has(RDMA_CM_EVENT_ADDR_RESOLVED) && ca.has(RDMA_CM_EVENT_ADDR_ERROR); }));

  cm::CmRequest l;
  l.local_ip = Pair::kOverlayB;
  l.local_port = 7174;
  l.ps = cm::kPsTcp;
  uint32_t lid, cid;
  uint16_t port;
  REQUIRE(cb.e.listen(1, l, &lid, &port) == 0);
  cm::CmRequest c;
  c.local_ip = Pair::kOverlayA;
  c.remote_ip = Pair::kOverlayB;
  c.remote_port = 7174;
  c.ps = cm::kPsTcp;
  c.qp_type = IBV_QPT_RC;
  c.params.qpn = 0x10001;
  c.params.psn = 5;
  REQUIRE(ca.e.connect(1, c, 0, &cid, &port) == 0);
  REQUIRE(rounds([&] { return cb.has(RDMA_CM_EVENT_CONNECT_REQUEST); }));
  CHECK(cb.events.back().remote_ip == Pair::kOverlayA);
  CHECK(cb.events.back().params.qpn == 0x10001);
  cm::CmRequest acc;
  acc.id = cb.events.back().id;
  acc.params.qpn = 0x10002;
  REQUIRE(cb.e.accept(1, acc, 0) == 0);
  REQUIRE(rounds([&] { return ca.has(RDMA_CM_EVENT_CONNECT_RESPONSE); }));
  CHECK(ca.events.back().params.qpn == 0x10002);
  cm::CmRequest est;
  est.id = cid;
  REQUIRE(ca.e.establish(1, est, 0) == 0);
  REQUIRE(rounds([&] { return cb.has(RDMA_CM_EVENT_ESTABLISHED) && ca.has(RDMA_CM_EVENT_ESTABLISHED); }));
  CHECK(ca.rings.tx_mads.load() >= 2);  // REQ, RTU
  CHECK(cb.rings.rx_mads.load() >= 2);
  CHECK(cb.e.counters().bad_mads == 0);
  CHECK(cb.e.counters().tenant_refused == 0);
  p.with([&] {
    CHECK(p.b.k().drops[static_cast<std::size_t>(Stage::kIngress)][static_cast<std::size_t>(DropReason::kConsumed)] ==
          0);  // handed over, not counted as a drop
    return 0;
  });
}
