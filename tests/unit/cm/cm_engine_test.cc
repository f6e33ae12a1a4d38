// The CM state machine between two engines joined by a fake lcore pair: what
// one sends the other receives (or loses, when a test says so), with the
// source checks the lcore's gate would attach. No sockets, no clock.
#include <catch2/catch.hpp>

#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>

#include "common/wire/byte_order.h"
#include "rnic/cm/cm_engine.h"

using namespace tandem::rnic::cm;

namespace {

constexpr uint32_t kIpA = 0xC0A80701, kIpB = 0xC0A80702;   // vNIC (overlay) addresses
constexpr uint32_t kUnderA = 0x0A000001, kUnderB = 0x0A000002;
constexpr uint16_t kPkey = 0x8001;
constexpr uint64_t kMs = 1'000'000;

struct Pair {
  CmEngine a{cfg(1)}, b{cfg(1000)};
  uint64_t now = 0;
  bool lose_a = false, lose_b = false;  // drop what A (B) sends
  std::vector<CmEngine::Event> ev_a, ev_b;
  uint16_t pkey_a = kPkey;              // what A's RNIC stamps (another tenant's: tests)

  static CmConfig cfg(uint32_t seed) {
    CmConfig c;
    c.response_timeout = 14;  // 67 ms
    c.max_retries = 3;
    c.mra_after_ns = 20 * kMs;
    c.timewait_ns = 50 * kMs;
    c.comm_id_seed = seed;
    return c;
  }
  Pair() {
    a.set_vnics({CmVnic{1, kIpA, kPkey, 0, 0xA}});
    b.set_vnics({CmVnic{2, kIpB, kPkey, 0, 0xB}});
    a.add_client(1, 0);
    b.add_client(1, 0);
  }
  // One engine's outbox into the other (or answered as the lcore would).
  void move(CmEngine& from, CmEngine& to, uint32_t from_under, uint32_t to_ip, bool lose, uint16_t pkey) {
    std::vector<GsiOut> out;
    out.swap(from.mads_out());
    for (const GsiOut& o : out) {
      if (o.kind == GsiOut::kProbe) {
        from.on_route(o.probe, o.remote_ip == to_ip ? 1 : 0);
        continue;
      }
      if (lose) continue;
      MadSource s;
      s.underlay = from_under;
      s.pkey = o.kind == GsiOut::kReply ? o.pkey : pkey;
      const uint16_t attr = tandem::common::load_be16(o.mad + 16);
      if (attr == static_cast<uint16_t>(Attr::kReq)) {
        Gid g;
        std::memcpy(g.data(), o.mad + kMadHdrLen + 72, 16);
        for (const CmVnic& v : to.vnics())
          if (v.ip == ipv4_of_gid(g)) s.req_vnic = v.id + 1;
        s.req_route_underlay = from_under;
      } else if (attr == static_cast<uint16_t>(Attr::kSidrReq)) {  // the lcore reads the rdma_cm header
        CmaHdr h;
        if (read_cma_hdr(o.mad + kMadHdrLen + 16, h))
          for (const CmVnic& v : to.vnics())
            if (v.ip == h.dst_ip) s.req_vnic = v.id + 1;
        s.req_route_underlay = from_under;
      }
      to.on_mad(s, o.mad, now);
    }
  }
  void pump() {
    for (int i = 0; i < 8; ++i) {
      move(a, b, kUnderA, kIpB, lose_a, pkey_a);
      move(b, a, kUnderB, kIpA, lose_b, kPkey);
      for (auto& e : a.events_out()) ev_a.push_back(e);
      a.events_out().clear();
      for (auto& e : b.events_out()) ev_b.push_back(e);
      b.events_out().clear();
    }
  }
  void advance(uint64_t ns) {
    const uint64_t end = now + ns;
    while (now < end) {
      now += kMs;
      a.tick(now);
      b.tick(now);
      pump();
    }
  }
  uint32_t listen(uint16_t port) {
    CmRequest r;
    r.local_ip = kIpB;
    r.local_port = port;
    r.ps = kPsTcp;
    r.cookie = 77;
    uint32_t id;
    uint16_t p;
    REQUIRE(b.listen(1, r, &id, &p) == 0);
    return id;
  }
  uint32_t connect(uint16_t port, const char* priv = "hello") {
    CmRequest r;
    r.local_ip = kIpA;
    r.remote_ip = kIpB;
    r.remote_port = port;
    r.ps = kPsTcp;
    r.qp_type = 2;
    r.cookie = 5;
    r.params.qpn = 0x111;
    r.params.psn = 0x222;
    r.params.retry_count = 7;
    r.params.rnr_retry_count = 7;
    r.private_len = static_cast<uint32_t>(std::strlen(priv));
    std::memcpy(r.private_data, priv, r.private_len);
    uint32_t id;
    uint16_t p;
    REQUIRE(a.connect(1, r, now, &id, &p) == 0);
    pump();
    return id;
  }
  static bool has(const std::vector<CmEngine::Event>& v, uint32_t type, int32_t status = 0) {
    for (const auto& e : v)
      if (e.msg.event == type && e.msg.status == status) return true;
    return false;
  }
};

}  // namespace

TEST_CASE("REQ, REP, RTU: both sides established with each other's QPN, PSN and private data") {
  Pair p;
  p.listen(7174);
  const uint32_t id = p.connect(7174);
  REQUIRE(p.ev_b.size() == 1);
  const CmEventMsg req = p.ev_b[0].msg;  // a copy: pump() grows ev_b
  CHECK(req.event == RDMA_CM_EVENT_CONNECT_REQUEST);
  CHECK(req.cookie == 77);
  CHECK(req.params.qpn == 0x111);
  CHECK(req.params.psn == 0x222);
  CHECK(req.remote_ip == kIpA);
  CHECK(req.local_port == 7174);
  CHECK(std::memcmp(req.private_data, "hello", 5) == 0);
  CmRequest acc;
  acc.id = req.id;
  acc.cookie = 78;
  acc.params.qpn = 0x333;
  acc.params.psn = 0x444;
  std::memcpy(acc.private_data, "ok", 2);
  acc.private_len = 2;
  REQUIRE(p.b.accept(1, acc, p.now) == 0);
  p.pump();
  REQUIRE(Pair::has(p.ev_a, RDMA_CM_EVENT_CONNECT_RESPONSE));
  CHECK(p.ev_a.back().msg.params.qpn == 0x333);
  CHECK(p.ev_a.back().msg.params.psn == 0x444);
  CHECK(std::memcmp(p.ev_a.back().msg.private_data, "ok", 2) == 0);
  CmRequest est;
  est.id = id;
  REQUIRE(p.a.establish(1, est, p.now) == 0);
  p.pump();
  CHECK(Pair::has(p.ev_a, RDMA_CM_EVENT_ESTABLISHED));
  CHECK(Pair::has(p.ev_b, RDMA_CM_EVENT_ESTABLISHED));
  ConnState s;
  REQUIRE(p.b.state_of(req.id, &s));
  CHECK(s == ConnState::kEstablished);
  // DREQ/DREP: both see DISCONNECTED; timewait then frees both.
  REQUIRE(p.a.disconnect(1, est, p.now) == 0);
  p.pump();
  CHECK(Pair::has(p.ev_a, RDMA_CM_EVENT_DISCONNECTED));
  CHECK(Pair::has(p.ev_b, RDMA_CM_EVENT_DISCONNECTED));
  p.advance(60 * kMs);
  CHECK(p.a.connections() == 0);
  CHECK(p.b.connections() == 0);
  CHECK(p.a.counters().retries == 0);
}

TEST_CASE("a REQ to a port nobody listens on is rejected with IBA's invalid service ID") {
  Pair p;
  p.listen(7174);
  p.connect(9999);
  REQUIRE(Pair::has(p.ev_a, RDMA_CM_EVENT_REJECTED, static_cast<int32_t>(RejReason::kInvalidServiceId)));
  CHECK(p.b.counters().no_listener == 1);
  CHECK(p.b.connections() == 0);
}

TEST_CASE("another tenant's REQ is refused like a missing listener, and counted") {
  Pair p;
  p.listen(7174);
  p.pkey_a = 0x8002;  // A is another tenant's vNIC: its RNIC stamps that tenant's partition
  p.a.set_vnics({CmVnic{1, kIpA, 0x8002, 0, 0xA}});
  p.connect(7174);
  REQUIRE(Pair::has(p.ev_a, RDMA_CM_EVENT_REJECTED, static_cast<int32_t>(RejReason::kInvalidServiceId)));
  CHECK(p.b.counters().tenant_refused == 1);
  CHECK(p.ev_b.empty());  // the listener never hears of it
}

TEST_CASE("an unanswered REQ is resent max_retries times, then UNREACHABLE with -ETIMEDOUT") {
  Pair p;
  p.lose_a = true;
  p.connect(7174);
  p.advance(2000 * kMs);
  CHECK(p.a.counters().retries == 3);
  CHECK(p.a.counters().timeouts == 1);
  CHECK(Pair::has(p.ev_a, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT));
}

TEST_CASE("a half-open connection (the RTU never comes) times out on the passive side") {
  Pair p;
  p.listen(7174);
  p.connect(7174);
  CmRequest acc;
  acc.id = p.ev_b[0].msg.id;
  acc.params.qpn = 0x333;
  p.lose_a = true;  // the active side went silent after its REQ
  REQUIRE(p.b.accept(1, acc, p.now) == 0);
  p.pump();
  p.advance(3000 * kMs);
  CHECK(p.b.counters().retries == 3);  // the REQ's max CM retries (ours: 3)
  CHECK(Pair::has(p.ev_b, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT));
  ConnState s;
  CHECK((!p.b.state_of(acc.id, &s) || s == ConnState::kTimewait));
}

TEST_CASE("a slow application gets an MRA sent for it; the requester waits instead of giving up") {
  Pair p;
  p.listen(7174);
  const uint32_t id = p.connect(7174);
  p.advance(1000 * kMs);  // far past the REQ's own retries (3 x 134 ms)
  CHECK(p.a.counters().timeouts == 0);
  ConnState s;
  REQUIRE(p.a.state_of(id, &s));
  CHECK(s == ConnState::kReqSent);
  CmRequest acc;
  acc.id = p.ev_b[0].msg.id;
  REQUIRE(p.b.accept(1, acc, p.now) == 0);
  p.pump();
  CHECK(Pair::has(p.ev_a, RDMA_CM_EVENT_CONNECT_RESPONSE));
}

TEST_CASE("rdma_reject: REJECTED with the consumer's reason and private data") {
  Pair p;
  p.listen(7174);
  p.connect(7174);
  CmRequest rej;
  rej.id = p.ev_b[0].msg.id;
  std::memcpy(rej.private_data, "no", 2);
  rej.private_len = 2;
  REQUIRE(p.b.reject(1, rej, p.now) == 0);
  p.pump();
  REQUIRE(Pair::has(p.ev_a, RDMA_CM_EVENT_REJECTED, static_cast<int32_t>(RejReason::kConsumerDefined)));
  CHECK(std::memcmp(p.ev_a.back().msg.private_data, "no", 2) == 0);
}

TEST_CASE("unsolicited and malformed MADs are dropped and counted") {
  Pair p;
  CmMsg m;
  m.hdr.attr = Attr::kRtu;
  m.remote_comm_id = 424242;
  uint8_t b[kMadLen];
  encode_mad(m, b);
  MadSource s;
  s.pkey = kPkey;
  p.b.on_mad(s, b, 0);
  CHECK(p.b.counters().unsolicited == 1);
  b[2] = 9;  // class version
  p.b.on_mad(s, b, 0);
  CHECK(p.b.counters().bad_mads == 1);
  CHECK(p.b.mads_out().empty());
  CHECK(p.b.events_out().empty());
}

TEST_CASE("an application that dies leaves no half-open connection: its peer is sent DREQ") {
  Pair p;
  p.listen(7174);
  const uint32_t id = p.connect(7174);
  CmRequest acc;
  acc.id = p.ev_b[0].msg.id;
  REQUIRE(p.b.accept(1, acc, p.now) == 0);
  p.pump();
  CmRequest est;
  est.id = id;
  REQUIRE(p.a.establish(1, est, p.now) == 0);
  p.pump();
  p.b.remove_client(1, p.now);
  p.pump();
  CHECK(Pair::has(p.ev_a, RDMA_CM_EVENT_DISCONNECTED));
  CHECK(p.b.listeners() == 0);
}

TEST_CASE("address resolution follows the vNIC's routes only") {
  Pair p;
  CmRequest r;
  r.remote_ip = kIpB;
  r.cookie = 3;
  REQUIRE(p.a.resolve(1, r, p.now) == 0);
  p.pump();
  REQUIRE(Pair::has(p.ev_a, RDMA_CM_EVENT_ADDR_RESOLVED));
  CHECK(p.ev_a.back().msg.local_ip == kIpA);
  r.remote_ip = 0x08080808;
  REQUIRE(p.a.resolve(1, r, p.now) == 0);
  p.pump();
  CHECK(Pair::has(p.ev_a, RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH));
}

TEST_CASE("RDMA_PS_UDP: SIDR_REQ and SIDR_REP give the active side the peer's QPN and Q_Key") {
  Pair p;
  CmRequest l;
  l.local_ip = kIpB;
  l.local_port = 7000;
  l.ps = kPsUdp;
  uint32_t lid, id;
  uint16_t port;
  REQUIRE(p.b.listen(1, l, &lid, &port) == 0);
  CmRequest r;
  r.local_ip = kIpA;
  r.remote_ip = kIpB;
  r.remote_port = 7000;
  r.ps = kPsUdp;
  r.qp_type = 4;  // IBV_QPT_UD
  REQUIRE(p.a.connect(1, r, p.now, &id, &port) == 0);
  p.pump();
  REQUIRE(Pair::has(p.ev_b, RDMA_CM_EVENT_CONNECT_REQUEST));
  CHECK(p.ev_b.back().msg.remote_ip == kIpA);
  CmRequest acc;
  acc.id = p.ev_b.back().msg.id;
  acc.params.qpn = 0x777;
  acc.params.qkey = 0x01234567;
  REQUIRE(p.b.accept(1, acc, p.now) == 0);
  p.pump();
  REQUIRE(Pair::has(p.ev_a, RDMA_CM_EVENT_ESTABLISHED));
  CHECK(p.ev_a.back().msg.params.qpn == 0x777);
  CHECK(p.ev_a.back().msg.params.qkey == 0x01234567);
  CHECK(p.a.connections() == 0);
  // Nobody on another port: SIDR_REP "no match", UNREACHABLE.
  r.remote_port = 7001;
  REQUIRE(p.a.connect(1, r, p.now, &id, &port) == 0);
  p.pump();
  CHECK(Pair::has(p.ev_a, RDMA_CM_EVENT_UNREACHABLE, -ECONNREFUSED));
}
