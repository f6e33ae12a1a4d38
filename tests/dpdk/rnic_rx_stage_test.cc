// The tandem-rnic receive passes (rnic/dpdk/rx_stage.h) under a real EAL
// (--no-huge --no-pci): a burst's headers parsed first, its ICRCs checked
// together, then the tenant check and the core. Every frame is counted once,
// accepted or dropped at its stage for the reason a frame-by-frame parse_roce
// (with its ICRC check) gives, including mutated and multi-segment frames.
// meson runs this binary twice: as is, and with TANDEM_CRC_NO_AVX512=1 (the
// library CRC that CPUs without AVX-512 VPCLMULQDQ use).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <rte_mbuf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/dpdk/eal.h"
#include "common/wire/icrc.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/connect_rc.h"
#include "rnic/core/frame.h"
#include "rnic/core/transport.h"
#include "rnic/dpdk/rx_stage.h"
#include "rnic/table/level2_table.h"

using namespace tandem;
using namespace tandem::rnic;
using namespace tandem::rnic::dpdk;
using common::DropReason;

namespace {

constexpr uint32_t kLocalUnderlay = 0x0A000002;
constexpr uint32_t kRemoteUnderlay = 0x0A000001;
constexpr uint32_t kRemoteOverlay = 0xC0A80001;

rte_mempool* pool() {
  static rte_mempool* p = rte_pktmbuf_pool_create("t_rx", 2047, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  return p;
}

void connect(Transport& t, uint32_t qpn, uint32_t dest, uint32_t peer) {
  QpAttr a;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  a.path_mtu = 1024;
  a.dest_qp_num = dest;
  a.peer = peer;
  a.timeout_ns = 1'000'000'000;
  REQUIRE(connect_rc(t, qpn, a) == 0);
}

// A receiving core with one QP, the table entries the tenant check reads,
// and a sending core whose frames (IRN RDMA WRITEs, in PSN order) it takes.
struct Pair {
  Transport rx{TransportConfig{4, 0x100, 8, 4, 1024}};
  Transport tx{TransportConfig{4, 0x200, 8, 4, 1024}};
  std::vector<uint8_t> rmem = std::vector<uint8_t>(1 << 20);
  std::vector<uint8_t> smem = std::vector<uint8_t>(1 << 20);
  uint32_t rqpn = 0, sqpn = 0, scq = 0;
  MemoryRegion rmr, smr;
  Level2Table table{Level2TableConfig{64}};

  // The QP as the worker binds it (check_ingress reads routed, vni).
  struct TestQp {
    bool routed = true;
    uint32_t vni = 100;
    uint16_t pkey = 0xFFFF;
    uint32_t core_qpn = 0;
    EgressRoute route;
  } qp;
  std::vector<std::vector<uint16_t>> no_path_sets;

  Pair() {
    rmr = rx.reg_mr(rmem.data(), rmem.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    smr = tx.reg_mr(smem.data(), smem.size(), IBV_ACCESS_LOCAL_WRITE);
    for (std::size_t i = 0; i < smem.size(); ++i) smem[i] = static_cast<uint8_t>(i * 13 + 5);
    QpInitAttr init;
    init.send_cq = init.recv_cq = rx.create_cq(4096);
    init.sq_depth = 512;
    rqpn = rx.create_qp(init);
    scq = tx.create_cq(4096);
    init.send_cq = init.recv_cq = scq;
    sqpn = tx.create_qp(init);
    connect(tx, sqpn, rqpn, 0xC0A80002);
    connect(rx, rqpn, sqpn, kRemoteOverlay);
    qp.core_qpn = rqpn;
    common::IngressAction ia;
    ia.overlay_src_ip = kRemoteOverlay;
    ia.vni = 100;
    ia.local_vnic_id = 1;
    common::EgressAction ea;
    ea.underlay_src_ip = kLocalUnderlay;
    ea.underlay_dst_ip = kRemoteUnderlay;
    ea.path_base_port = common::kEntropyPortBase;
    ea.path_count = 4;
    table.begin();
    table.put(common::make_ingress_entry(common::ingress_key_vni(kRemoteUnderlay, 100), ia));
    table.put(common::make_egress_entry(common::egress_key(1, kRemoteOverlay), ea));
    table.commit();
  }

  // n WRITEs of `payload` bytes each, one frame per message, PSNs in order.
  std::vector<std::vector<uint8_t>> frames(uint32_t n, uint32_t payload) {
    std::vector<std::vector<uint8_t>> out;
    FrameAddrs fa;
    fa.src_ip = kRemoteUnderlay;
    fa.dst_ip = kLocalUnderlay;
    Completion wc[64];
    uint32_t posted = 0;
    while (out.size() < n) {
      while (posted < n && posted - out.size() < 128) {
        SendWr wr;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.remote_addr = reinterpret_cast<uint64_t>(rmem.data()) + (posted % 512) * 2048;
        wr.rkey = rmr.rkey;
        wr.num_sge = 1;
        wr.sg_list[0] = Sge{reinterpret_cast<uint64_t>(smem.data()) + (posted % 512) * 2048, payload, smr.lkey};
        if (tx.post_send(sqpn, wr) != 0) break;
        ++posted;
      }
      tx.poll(0);
      uint32_t last_psn = 0;
      bool any = false;
      while (!tx.tx().empty()) {
        std::vector<uint8_t> f(4096);
        f.resize(build_frame(tx.tx().front(), fa, f.data(), f.size()));
        last_psn = tx.tx().front().bth.psn;
        any = true;
        out.push_back(std::move(f));
        tx.tx().pop();
      }
      if (any) {  // acknowledge, so the window moves on
        common::RocePacket ack;
        ack.bth.opcode = IBV_OPCODE_RC_ACKNOWLEDGE;
        ack.bth.dqpn = sqpn;
        ack.bth.psn = last_psn;
        ack.aeth.syndrome = 0x1F;
        tx.on_packet(ack, nullptr, 0, 0);
      }
      while (tx.poll_cq(scq, wc, 64) > 0) {
      }
    }
    out.resize(n);
    return out;
  }

  // Runs frames through the stage with the tenant check the worker uses.
  uint32_t run(RxStage& stage, std::vector<rte_mbuf*>& ms, WorkerCounters& k) {
    const Level2Table::Snapshot snap = table.begin_read();
    const uint32_t taken =
        stage.run(ms.data(), static_cast<uint16_t>(ms.size()), rx, k, 1, [&](common::RocePacket& pkt, uint8_t*) {
          TestQp* q = nullptr;
          const DropReason r = check_ingress(
              pkt, kLocalUnderlay, table, snap, [&](uint32_t n) { return n == qp.core_qpn ? &qp : nullptr; },
              [&](TestQp& t) -> const EgressRoute* {
                if (!t.route.fresh(snap.version, kRemoteOverlay)) {
                  const Level2Entry* e = table.lookup(snap, common::egress_key(1, kRemoteOverlay));
                  if (e == nullptr) return nullptr;
                  t.route.resolve(e->egress, common::MacAddr{}, no_path_sets, snap.version, kRemoteOverlay);
                }
                return &t.route;
              },
              &q);
          if (r != DropReason::kNone) return r;
          pkt.bth.dqpn = q->core_qpn;
          return DropReason::kNone;
        });
    rte_pktmbuf_free_bulk(ms.data(), static_cast<unsigned>(ms.size()));
    ms.clear();
    return taken;
  }
};

// One mbuf holding the bytes, or a chain of two split at `split` (0: one).
rte_mbuf* to_mbuf(const std::vector<uint8_t>& f, std::size_t split = 0) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool());
  REQUIRE(m != nullptr);
  const std::size_t first = split ? std::min(split, f.size()) : f.size();
  std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(first)), f.data(), first);
  if (split && first < f.size()) {
    rte_mbuf* t = rte_pktmbuf_alloc(pool());
    REQUIRE(t != nullptr);
    std::memcpy(rte_pktmbuf_append(t, static_cast<uint16_t>(f.size() - first)), f.data() + first, f.size() - first);
    REQUIRE(rte_pktmbuf_chain(m, t) == 0);
  }
  return m;
}

// Rebuilds a frame after changing its parsed headers (checksums and ICRC redone).
std::vector<uint8_t> rebuilt(const std::vector<uint8_t>& f, void (*change)(common::RocePacket&)) {
  common::RocePacket pkt;
  REQUIRE(common::parse_roce(f.data(), f.size(), pkt) == DropReason::kNone);
  change(pkt);
  std::vector<uint8_t> out(f.size() + 64);
  out.resize(common::build_roce(pkt, std::span(f.data() + pkt.payload_offset, pkt.payload_len), out.data(),
                                out.size()));
  REQUIRE(!out.empty());
  return out;
}

uint64_t total_drops(const WorkerCounters& k) {
  uint64_t n = 0;
  for (const auto& s : k.drops)
    for (uint64_t d : s) n += d;
  return n;
}

}  // namespace

TEST_CASE("each frame of a burst is accepted, or dropped once at its stage and for its reason") {
  Pair p;
  std::vector<std::vector<uint8_t>> f = p.frames(40, 64);
  // Frames 0-31 are the first burst, 32-39 the second; the bad ones carry PSNs
  // the core never sees, so the good ones after them land out of order (IRN
  // places them and waits).
  std::vector<uint8_t> bad_icrc = f[3];
  bad_icrc[bad_icrc.size() - 20] ^= 0x40;  // a payload byte: only the ICRC notices
  std::vector<uint8_t> bad_ipsum = f[5];
  bad_ipsum[14 + 8] ^= 0x01;  // the TTL: the IPv4 checksum fails before the ICRC is looked at
  std::vector<uint8_t> truncated(f[7].begin(), f[7].begin() + 50);
  const std::vector<uint8_t> unknown_qpn = rebuilt(f[9], [](common::RocePacket& k) { k.bth.dqpn ^= 0x40; });
  const std::vector<uint8_t> wrong_src = rebuilt(f[11], [](common::RocePacket& k) { k.ip.src = 0x0A0000FE; });
  const std::vector<uint8_t> wrong_dst = rebuilt(f[13], [](common::RocePacket& k) { k.ip.dst = 0x0A0000FD; });
  f[3] = bad_icrc;
  f[5] = bad_ipsum;
  f[7] = truncated;
  f[9] = unknown_qpn;
  f[11] = wrong_src;
  f[13] = wrong_dst;

  RxStage stage;
  WorkerCounters k;
  std::vector<rte_mbuf*> ms;
  for (std::size_t i = 0; i < f.size(); ++i) ms.push_back(to_mbuf(f[i], i == 17 || i == 35 ? 60 : 0));
  const uint32_t taken = p.run(stage, ms, k);  // 40 frames: two passes of the stage
  CHECK(taken == 34);
  CHECK(k.rx_packets == 40);
  CHECK(k.rx_accepted == 34);
  CHECK(k.rx_linearized == 2);
  CHECK(k.dropped(Stage::kParse, DropReason::kBadIcrc) == 1);
  CHECK(k.dropped(Stage::kParse, DropReason::kBadIpChecksum) == 1);
  CHECK(k.dropped(Stage::kParse, DropReason::kTruncated) == 1);
  CHECK(k.dropped(Stage::kIngress, DropReason::kUnknownQpn) == 1);
  CHECK(k.dropped(Stage::kIngress, DropReason::kTenantMismatch) == 1);
  CHECK(k.dropped(Stage::kIngress, DropReason::kTableMiss) == 1);
  CHECK(total_drops(k) == 6);
  CHECK(p.rx.counters().rx_pkts == 34);
  uint64_t bytes = 0;
  for (const auto& x : f) bytes += x.size();
  CHECK(k.rx_bytes == bytes);

  // The good frames' payloads are in the receiver's memory, the linearised
  // ones too (frame 17's WRITE went to slot 17).
  for (uint32_t i : {0u, 17u, 35u, 39u}) {
    const uint8_t* got = p.rmem.data() + i * 2048;
    const uint8_t* want = p.smem.data() + i * 2048;
    CHECK(std::equal(want, want + 64, got));
  }
  // The dropped ones placed nothing.
  for (uint32_t i : {3u, 5u, 7u, 9u, 11u, 13u}) {
    const uint8_t* got = p.rmem.data() + i * 2048;
    CHECK(std::all_of(got, got + 64, [](uint8_t b) { return b == 0; }));
  }
}

TEST_CASE("a frame stamped with another partition's P_Key is dropped as pkey_violation and places nothing") {
  Pair p;
  p.qp.pkey = 0x8005;  // the QP's tenant's partition, as its vNIC entry gives it
  std::vector<std::vector<uint8_t>> f = p.frames(6, 64);
  // Frames 0-2 carry the QP's key; 3 the default partition (an unpartitioned
  // sender); 4 another tenant's key; 5 the same partition as a limited member.
  for (int i = 0; i < 3; ++i) f[i] = rebuilt(f[i], [](common::RocePacket& k) { k.bth.pkey = 0x8005; });
  f[4] = rebuilt(f[4], [](common::RocePacket& k) { k.bth.pkey = 0x8006; });
  f[5] = rebuilt(f[5], [](common::RocePacket& k) { k.bth.pkey = 0x0005; });
  RxStage stage;
  WorkerCounters k;
  std::vector<rte_mbuf*> ms;
  for (const auto& x : f) ms.push_back(to_mbuf(x));
  CHECK(p.run(stage, ms, k) == 3);
  CHECK(k.dropped(Stage::kIngress, DropReason::kPkeyViolation) == 3);
  CHECK(total_drops(k) == 3);
  CHECK(p.rx.counters().rx_pkts == 3);
  for (uint32_t i : {3u, 4u, 5u}) {
    const uint8_t* got = p.rmem.data() + i * 2048;
    CHECK(std::all_of(got, got + 64, [](uint8_t b) { return b == 0; }));
  }
}

TEST_CASE("a burst of mutated frames passes validation exactly where frame-by-frame parse_roce does") {
  Pair p;
  const std::vector<std::vector<uint8_t>> small = p.frames(64, 64);
  const std::vector<std::vector<uint8_t>> large = p.frames(16, 1024);
  std::mt19937 rng(7);
  RxStage stage;
  for (int round = 0; round < 300; ++round) {
    const uint16_t n = static_cast<uint16_t>(1 + rng() % RxStage::kMaxBurst);
    std::vector<std::vector<uint8_t>> burst;
    std::vector<rte_mbuf*> ms;
    for (uint16_t i = 0; i < n; ++i) {
      std::vector<uint8_t> f = rng() % 4 == 0 ? large[rng() % large.size()] : small[rng() % small.size()];
      switch (rng() % 6) {
        case 0: break;  // untouched
        case 1: f[rng() % f.size()] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 2: f.resize(rng() % f.size()); break;
        case 3: f[rng() % std::min<std::size_t>(f.size(), 80)] = static_cast<uint8_t>(rng()); break;
        case 4: f.resize(f.size() + 1 + rng() % 16, 0xAB); break;  // Ethernet padding / junk after the datagram
        case 5: f[14 + 2] ^= 0x01; break;                          // IPv4 total length
      }
      burst.push_back(f);
      const std::size_t split = (!f.empty() && rng() % 5 == 0) ? 1 + rng() % f.size() : 0;
      ms.push_back(to_mbuf(f, split));
    }
    WorkerCounters k;
    const uint16_t ok = stage.validate(ms.data(), n, k);
    WorkerCounters want;
    std::vector<common::RocePacket> passed;
    for (const auto& f : burst) {
      common::RocePacket pkt;
      const DropReason r = common::parse_roce(f.data(), f.size(), pkt);
      if (r == DropReason::kNone)
        passed.push_back(pkt);
      else
        want.drop(Stage::kParse, r);
    }
    REQUIRE(ok == passed.size());
    CHECK(k.rx_packets == n);
    CHECK(k.drops == want.drops);
    for (uint16_t i = 0; i < ok; ++i) {
      const common::RocePacket& a = stage.packet(i);
      const common::RocePacket& b = passed[i];
      CHECK(a.bth.psn == b.bth.psn);
      CHECK(a.payload_offset == b.payload_offset);
      CHECK(a.payload_len == b.payload_len);
      CHECK(a.icrc_checked);
      CHECK(a.icrc_computed == b.icrc_computed);
    }
    rte_pktmbuf_free_bulk(ms.data(), n);
  }
  INFO("crc backend: " << common::crc32_backend());
  SUCCEED();
}

int main(int argc, char** argv) {
  const std::string prefix = "tandem-rnic-rxstage-" + std::to_string(getpid());
  try {
    common::dpdk::eal_init("rnic_rx_stage_test", {"--no-huge", "--no-pci", "-l", "0", "-m", "64",
                                                   "--file-prefix=" + prefix, "--log-level=error"});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::printf("crc backend: %s\n", common::crc32_backend());
  const int rc = Catch::Session().run(argc, argv);
  common::dpdk::eal_cleanup();
  std::error_code ec;
  std::filesystem::remove_all("/var/run/dpdk/" + prefix, ec);
  return rc;
}
