// Parts of the tandem-rnic worker under a real EAL (--no-huge --no-pci):
// the TX encapsulation produces exactly the frame the core's build_frame
// would (zero-copy chains and copies alike, ICRC chained over the pieces),
// never frees application memory, a QP's frame template follows route and
// destination QP changes mid-stream, and the standalone YAML table loads or
// fails with the field at fault.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <rte_mbuf.h>
#include <rte_memory.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/dpdk/eal.h"
#include "common/wire/byte_order.h"
#include "common/wire/entropy.h"
#include "common/wire/opcode.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/frame.h"
#include "rnic/dpdk/dma_registry.h"
#include "rnic/port/egress_route.h"
#include "rnic/port/standalone_table.h"
#include "rnic/dpdk/tx_encap.h"
#include "rnic/dpdk/tx_payload_mode.h"

using namespace tandem;
using namespace tandem::rnic;
using namespace tandem::rnic::dpdk;
using tandem::rnic::port::EgressRoute;
using namespace tandem::rnic::port;

namespace {

rte_mempool* hdr_pool() {
  static rte_mempool* p = rte_pktmbuf_pool_create("t_hdr", 1023, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  return p;
}
rte_mempool* ext_pool() {
  static rte_mempool* p = rte_pktmbuf_pool_create("t_ext", 1023, 0, 0, 0, SOCKET_ID_ANY);
  return p;
}

std::vector<uint8_t> app_memory(std::size_t n) {
  std::vector<uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
  return v;
}

// The application memory's region key (slot 1): what TxEncap pins while the NIC holds a segment.
constexpr uint32_t kLkey = 0x101;

TxDesc write_desc(const std::vector<uint8_t>& mem, std::initializer_list<std::pair<uint32_t, uint32_t>> segs,
                  bool xeth, uint32_t lkey = kLkey) {
  TxDesc d;
  d.bth.opcode = xeth ? 0x08 /* RC_RDMA_WRITE_LAST */ : 0x0A /* RC_RDMA_WRITE_ONLY */;
  d.bth.dqpn = 0x10001;
  d.bth.psn = 1234;
  d.bth.ack_req = true;
  d.reth = common::Reth{0x7f0000001000, 0x1234, 0};
  d.has_xeth = xeth;
  d.xeth = Xeth{5, 4096, 8192, 0x4321, 0x7f0000002000};
  d.udp_sport = 0xC00A;
  for (auto [off, len] : segs) {
    d.segs[d.num_segs++] = TxSeg{mem.data() + off, len, lkey};
    d.payload_len += len;
  }
  d.reth.len = d.payload_len;
  return d;
}

EncapAddrs addrs() {
  EncapAddrs a;
  a.src_mac = {2, 0, 0, 0, 0, 1};
  a.dst_mac = {2, 0, 0, 0, 0, 0xfe};
  a.src_ip = 0x0A000001;
  a.dst_ip = 0x0A000002;
  a.sport = 0xC00A;
  return a;
}

std::vector<uint8_t> reference(const TxDesc& d, const EncapAddrs& a = addrs()) {
  FrameAddrs f;
  f.src_mac = a.src_mac;
  f.dst_mac = a.dst_mac;
  f.src_ip = a.src_ip;
  f.dst_ip = a.dst_ip;
  std::vector<uint8_t> out(9000);
  out.resize(build_frame(d, f, out.data(), out.size()));
  return out;
}

std::vector<uint8_t> flatten(rte_mbuf* m) {
  std::vector<uint8_t> v(m->pkt_len);
  const void* p = rte_pktmbuf_read(m, 0, m->pkt_len, v.data());
  if (p != v.data()) std::memcpy(v.data(), p, m->pkt_len);
  return v;
}

}  // namespace

TEST_CASE("a zero-copy WRITE is a chain of header, application memory and ICRC tail, equal to build_frame") {
  auto mem = app_memory(4096);
  TxEncap enc(hdr_pool(), ext_pool(), false);
  const TxDesc d = write_desc(mem, {{100, 300}, {1000, 701}}, false);
  rte_mbuf* m = enc.build(d, addrs());
  REQUIRE(m != nullptr);
  CHECK(m->nb_segs == 4);
  CHECK(rte_pktmbuf_mtod(m->next, const uint8_t*) == mem.data() + 100);  // attached, not copied
  CHECK(enc.counters().zero_copy_segs == 2);
  CHECK(enc.ext_in_flight() == 2);
  CHECK(enc.in_flight(kLkey >> 8));      // the region's pages are held while the NIC has them
  CHECK_FALSE(enc.in_flight(2));          // another region's are not
  const auto bytes = flatten(m);
  CHECK(bytes == reference(d));
  common::RocePacket pkt;
  CHECK(common::parse_roce(bytes.data(), bytes.size(), pkt) == common::DropReason::kNone);
  CHECK(pkt.payload_len == 1001);
  rte_pktmbuf_free(m);
  CHECK(enc.ext_in_flight() == 0);
  CHECK_FALSE(enc.in_flight(kLkey >> 8));
  CHECK(mem[100] == static_cast<uint8_t>(100 * 7 + 3));  // the application's memory is untouched
}

TEST_CASE("bytes in no region (the core's inline data, key 0) are copied, never attached") {
  auto mem = app_memory(4096);
  TxEncap enc(hdr_pool(), ext_pool(), false);
  const TxDesc d = write_desc(mem, {{0, 1000}}, false, 0);
  rte_mbuf* m = enc.build(d, addrs());
  REQUIRE(m != nullptr);
  CHECK(m->nb_segs == 1);
  CHECK(enc.ext_in_flight() == 0);
  CHECK(flatten(m) == reference(d));
  rte_pktmbuf_free(m);
}

TEST_CASE("IRN data with a placement header encapsulates to the same bytes in copy and zero-copy mode") {
  auto mem = app_memory(4096);
  const TxDesc d = write_desc(mem, {{0, 1021}}, true);
  TxEncap zc(hdr_pool(), ext_pool(), false), cp(hdr_pool(), ext_pool(), true);
  rte_mbuf* a = zc.build(d, addrs());
  rte_mbuf* b = cp.build(d, addrs());
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  CHECK(a->nb_segs == 3);
  CHECK(b->nb_segs == 1);
  CHECK(cp.counters().copied_bytes == 1021);
  CHECK(flatten(a) == reference(d));
  CHECK(flatten(b) == reference(d));
  rte_pktmbuf_free(a);
  rte_pktmbuf_free(b);
}

TEST_CASE("small payloads and ACKs are copied into one mbuf even in zero-copy mode") {
  auto mem = app_memory(256);
  TxEncap enc(hdr_pool(), ext_pool(), false);
  const TxDesc d = write_desc(mem, {{0, 64}}, false);
  rte_mbuf* m = enc.build(d, addrs());
  REQUIRE(m != nullptr);
  CHECK(m->nb_segs == 1);
  CHECK(flatten(m) == reference(d));
  rte_pktmbuf_free(m);

  TxDesc ack;
  ack.bth.opcode = 0x11;  // RC_ACKNOWLEDGE
  ack.bth.dqpn = 0x20002;
  ack.bth.psn = 77;
  ack.aeth = common::Aeth{0x1F, 9};
  ack.udp_sport = 0xC00A;
  TxEncap fresh(hdr_pool(), ext_pool(), false);  // IPv4 id 0 again, as build_frame writes
  m = fresh.build(ack, addrs());
  REQUIRE(m != nullptr);
  const auto bytes = flatten(m);
  CHECK(bytes == reference(ack));
  common::RocePacket pkt;
  CHECK(common::parse_roce(bytes.data(), bytes.size(), pkt) == common::DropReason::kNone);
  rte_pktmbuf_free(m);

  // An ECN echo (BECN) through the QP's own template: the BTH word that
  // carries it is written from the descriptor, not taken from the template.
  ack.bth.becn = true;
  TxEncap echo(hdr_pool(), ext_pool(), false);
  m = echo.build(ack, make_encap_template(addrs(), ack.bth.dqpn), ack.udp_sport);
  REQUIRE(m != nullptr);
  CHECK(flatten(m) == reference(ack));
  rte_pktmbuf_free(m);
}

TEST_CASE("frames from a per-QP template equal build_frame for every length, opcode and path, copied or chained") {
  auto mem = app_memory(4096);
  // The QP's template (its BTH already names the descriptor's destination
  // QP), and one naming another QP (the BTH word is then written per frame).
  for (const uint32_t tmpl_dqpn : {0x10001u, 0u})
  for (const bool copy : {true, false})
    for (const bool xeth : {false, true})
      for (uint32_t len = 0; len <= 300; len += (len < 40 ? 1 : 7)) {
        TxDesc d = write_desc(mem, {{len % 13, len / 2}, {2000, len - len / 2}}, xeth);
        d.bth.psn = 0xFFFFF0 + len;
        d.udp_sport = static_cast<uint16_t>(0xC000 + len * 37);
        TxEncap enc(hdr_pool(), ext_pool(), copy);  // IPv4 id 0, as build_frame writes
        const EncapTemplate t = make_encap_template(addrs(), tmpl_dqpn);
        rte_mbuf* m = enc.build(d, t, d.udp_sport);
        REQUIRE(m != nullptr);
        INFO("template dqpn " << tmpl_dqpn << " copy " << copy << " xeth " << xeth << " len " << len);
        CHECK(flatten(m) == reference(d));
        rte_pktmbuf_free(m);
        enc.release();
      }
}

TEST_CASE("frames whose ICRC is deferred to finish() are the same bytes, also past a full burst") {
  auto mem = app_memory(4096);
  const EncapTemplate t = make_encap_template(addrs());
  TxEncap enc(hdr_pool(), ext_pool(), false), ref(hdr_pool(), ext_pool(), false);
  std::vector<rte_mbuf*> got, want;
  for (uint32_t i = 0; i < 45; ++i) {  // more than one burst of deferred frames
    TxDesc d = write_desc(mem, {{i, 40 + i * 5}}, i % 2 == 0);  // copied and chained alike
    d.bth.psn = i;
    d.udp_sport = static_cast<uint16_t>(0xC000 + i);
    got.push_back(enc.build(d, t, d.udp_sport, true));
    want.push_back(ref.build(d, t, d.udp_sport));
    REQUIRE(got.back() != nullptr);
  }
  enc.finish();
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("frame " << i);
    CHECK(flatten(got[i]) == flatten(want[i]));
    rte_pktmbuf_free(got[i]);
    rte_pktmbuf_free(want[i]);
  }
  enc.release();
  ref.release();
}

TEST_CASE("consecutive frames count the IPv4 id up and keep the header checksum valid") {
  auto mem = app_memory(256);
  TxEncap enc(hdr_pool(), ext_pool(), true);
  const EncapTemplate t = make_encap_template(addrs());
  for (uint32_t i = 0; i < 70000; i += 1) {
    const TxDesc d = write_desc(mem, {{0, 64}}, true);
    rte_mbuf* m = enc.build(d, t, 0xC00A);
    REQUIRE(m != nullptr);
    if (i % 997 == 0 || i == 65535 || i == 65536) {
      const auto bytes = flatten(m);
      CHECK(common::load_be16(bytes.data() + 18) == static_cast<uint16_t>(i));
      uint32_t sum = 0;
      for (int k = 0; k < 20; k += 2) sum += common::load_be16(bytes.data() + 14 + k);
      while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
      CHECK(sum == 0xFFFF);
      common::RocePacket pkt;
      CHECK(common::parse_roce(bytes.data(), bytes.size(), pkt) == common::DropReason::kNone);
    }
    rte_pktmbuf_free(m);
  }
  enc.release();
}

TEST_CASE("an egress route maps the core's path onto the entry's ports and goes stale on a new table version") {
  common::EgressAction a;
  a.underlay_src_ip = 0x0A000001;
  a.underlay_dst_ip = 0x0A000002;
  a.dst_mac = {2, 0, 0, 0, 0, 0xfe};
  a.path_base_port = 50000;
  a.path_count = 4;
  const std::vector<std::vector<uint16_t>> sets = {{49152, 50000, 60001}};
  EgressRoute r;
  CHECK_FALSE(r.fresh(0, 7));
  r.resolve(a, {2, 0, 0, 0, 0, 1}, sets, 3, 7);
  CHECK(r.fresh(3, 7));
  CHECK_FALSE(r.fresh(4, 7));
  CHECK_FALSE(r.fresh(3, 8));
  CHECK(r.sport(0xC000) == 50000);
  CHECK(r.sport(0xC005) == 50001);
  a.path_count = 3;  // not a power of two
  r.resolve(a, {2, 0, 0, 0, 0, 1}, sets, 3, 7);
  CHECK(r.sport(0xC005) == 50002);
  a.path_set_id = 1;
  r.resolve(a, {2, 0, 0, 0, 0, 1}, sets, 3, 7);
  CHECK(r.sport(0xC004) == 50000);
  CHECK(r.sport(0xC005) == 60001);
  r.invalidate();
  CHECK_FALSE(r.fresh(3, 7));
  // The template carries the entry's addressing: equal to build_frame's.
  a.path_set_id = 0;
  r.resolve(a, {2, 0, 0, 0, 0, 1}, sets, 3, 7);
  auto mem = app_memory(256);
  TxDesc d = write_desc(mem, {{0, 100}}, true);
  d.udp_sport = r.sport(0xC001);
  TxEncap enc(hdr_pool(), ext_pool(), false);
  rte_mbuf* m = enc.build(d, r.tmpl, d.udp_sport);
  REQUIRE(m != nullptr);
  CHECK(flatten(m) == reference(d));
  rte_pktmbuf_free(m);
  enc.release();
}

TEST_CASE("a route change mid-stream re-resolves the QP's template: frames after the commit carry the new addresses") {
  // What the worker's transmit path does per descriptor: the QP's route,
  // resolved again only when the table version moved, its template for the
  // descriptor's destination QP, its port for the core's path choice, and a
  // burst's ICRCs deferred to finish().
  constexpr uint32_t kPeer = 0xC0A80002;
  common::EgressAction first;
  first.underlay_src_ip = 0x0A000001;
  first.underlay_dst_ip = 0x0A000002;
  first.dst_mac = {2, 0, 0, 0, 0, 0xfe};
  first.path_base_port = common::kEntropyPortBase;
  first.path_count = 4;
  common::EgressAction moved = first;  // the remote moved behind another RNIC
  moved.underlay_dst_ip = 0x0A000009;
  moved.dst_mac = {2, 0, 0, 0, 0, 0x09};
  moved.path_base_port = 50000;
  moved.path_count = 2;
  Level2Table table(Level2TableConfig{64});
  const common::MacAddr src_mac = {2, 0, 0, 0, 0, 1};
  const std::vector<std::vector<uint16_t>> no_sets;
  auto mem = app_memory(512);
  for (const bool copy : {true, false}) {
    table.begin();
    table.put(common::make_egress_entry(common::egress_key(1, kPeer), first));
    table.commit();
    EgressRoute r;
    TxEncap enc(hdr_pool(), ext_pool(), copy), ref(hdr_pool(), ext_pool(), copy);
    std::vector<rte_mbuf*> got, want;
    uint32_t resolves = 0;
    for (uint32_t i = 0; i < 100; ++i) {
      if (i == 40) {  // the agent commits the new mapping between two bursts' packets
        table.begin();
        table.put(common::make_egress_entry(common::egress_key(1, kPeer), moved));
        table.commit();
      }
      TxDesc d = write_desc(mem, {{i, 64 + i * 3}}, i % 3 == 0);
      d.bth.psn = i;
      d.peer = kPeer;
      if (i >= 70) d.bth.dqpn = d.remote_qpn = 0x10777;  // the QP was modified to another remote QP
      d.udp_sport = static_cast<uint16_t>(common::kEntropyPortBase + i);
      const Level2Table::Snapshot snap = table.begin_read();
      if (!r.fresh(snap.version, d.peer)) {
        const Level2Entry* e = table.lookup(snap, common::egress_key(1, d.peer));
        REQUIRE(e != nullptr);
        r.resolve(e->egress, src_mac, no_sets, snap.version, d.peer);
        ++resolves;
      }
      const uint16_t sport = r.sport(d.udp_sport);
      got.push_back(enc.build(d, r.tmpl_for(d.bth.dqpn), sport, true));
      REQUIRE(got.back() != nullptr);
      if (i % 32 == 31) enc.finish();
      // The reference: build_frame with the addressing in force for packet i.
      const common::EgressAction& now = i < 40 ? first : moved;
      EncapAddrs a = addrs();
      a.dst_mac = now.dst_mac;
      a.dst_ip = now.underlay_dst_ip;
      TxDesc w = d;
      w.udp_sport = static_cast<uint16_t>(now.path_base_port + i % now.path_count);
      CHECK(sport == w.udp_sport);
      a.sport = w.udp_sport;
      want.push_back(ref.build(w, a));
      REQUIRE(want.back() != nullptr);
    }
    enc.finish();
    CHECK(resolves == 2);  // once at the start, once after the commit
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("copy " << copy << " frame " << i);
      const auto bytes = flatten(got[i]);
      const auto ref_bytes = flatten(want[i]);
      std::size_t diff = 0;
      while (diff < bytes.size() && diff < ref_bytes.size() && bytes[diff] == ref_bytes[diff]) ++diff;
      INFO("first difference at byte " << diff << " of " << bytes.size());
      CHECK(bytes == ref_bytes);
      common::RocePacket pkt;
      REQUIRE(common::parse_roce(bytes.data(), bytes.size(), pkt) == common::DropReason::kNone);
      CHECK(pkt.ip.dst == (i < 40 ? 0x0A000002u : 0x0A000009u));
      CHECK(pkt.eth.dst == (i < 40 ? first.dst_mac : moved.dst_mac));
      CHECK(pkt.bth.dqpn == (i < 70 ? 0x10001u : 0x10777u));
      CHECK(pkt.udp.sport == (i < 40 ? common::kEntropyPortBase + i % 4 : 50000 + i % 2));
      rte_pktmbuf_free(got[i]);
      rte_pktmbuf_free(want[i]);
    }
    enc.release();
    ref.release();
  }
}

TEST_CASE("the standalone YAML table loads vNICs, egress path sets and ingress entries") {
  const std::string path = "/tmp/rnic_parts_" + std::to_string(getpid()) + ".yaml";
  std::ofstream(path) << R"(underlay: {ip: 10.0.0.1, mac: "02:00:00:00:00:01", gateway_mac: "02:00:00:00:00:fe"}
vnics:
  - {id: 1, ip: 192.168.1.1, vni: 100}
  - {id: 2, ip: 172.16.0.1, vni: 200}
egress:
  - {vnic: 1, remote_ip: 192.168.1.2, underlay_ip: 10.0.0.2, paths: 4}
  - {vnic: 2, remote_ip: 172.16.0.9, underlay_ip: 10.0.0.9, mac: "02:00:00:00:00:09", paths: [49152, 50000]}
ingress:
  - {vnic: 1, underlay_src: 10.0.0.2, remote_ip: 192.168.1.2}
)";
  const StandaloneTable t = load_standalone_table(path);
  CHECK(t.underlay_ip == 0x0A000001);
  CHECK(t.vnics.size() == 2);
  // The file's 3, then each vNIC's loopback route (2) and the ingress entries the egress ones
  // imply where the file gives none (10.0.0.9 for tenant 200, this port's own for both tenants).
  REQUIRE(t.entries.size() == 8);
  CHECK(t.entries[0].egress.path_count == 4);
  CHECK(t.entries[0].egress.vni == 100);
  CHECK(t.entries[0].egress.dst_mac == common::MacAddr{2, 0, 0, 0, 0, 0xfe});  // the gateway by default
  CHECK(t.entries[1].egress.path_set_id == 1);
  CHECK(t.path_sets[0] == std::vector<uint16_t>{49152, 50000});
  Level2Table table(Level2TableConfig{64});
  commit_standalone_table(t, table);
  const auto snap = table.begin_read();
  CHECK(table.lookup(snap, common::egress_key(2, 0xAC100009)) != nullptr);
  CHECK(table.lookup(snap, common::ingress_key_vni(0x0A000002, 100)) != nullptr);
  CHECK(table.lookup(snap, common::ingress_key_vni(0x0A000002, 200)) == nullptr);
  CHECK(table.lookup(snap, common::ingress_key_vni(0x0A000009, 200)) != nullptr);
  CHECK(table.lookup(snap, common::egress_key(1, 0xC0A80101)) != nullptr);  // vNIC 1 reaches itself
  std::filesystem::remove(path);
}

TEST_CASE("a bad standalone table names the file and the field at fault") {
  const std::string path = "/tmp/rnic_parts_bad_" + std::to_string(getpid()) + ".yaml";
  auto fails_with = [&](const std::string& yaml, const std::string& what) {
    std::ofstream(path) << yaml;
    try {
      load_standalone_table(path);
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find(path) != std::string::npos);
      CHECK(msg.find(what) != std::string::npos);
      return;
    }
    FAIL("no error for: " << yaml);
  };
  const std::string head = "underlay: {ip: 10.0.0.1, mac: \"02:00:00:00:00:01\", gateway_mac: \"02:00:00:00:00:fe\"}\n";
  fails_with("vnics: [{id: 1, ip: 1.2.3.4, vni: 1}]\n", "'underlay'");
  fails_with("underlay: {ip: 10.0.0.300, mac: \"02:00:00:00:00:01\", gateway_mac: \"02:00:00:00:00:fe\"}\n", "10.0.0.300");
  fails_with(head + "vnics: [{id: 1, ip: 1.2.3.4, vni: 16777216}]\n", "24 bits");
  fails_with(head + "vnics: [{id: 1, ip: 1.2.3.4, vni: 1}]\negress: [{vnic: 7, remote_ip: 1.1.1.1, underlay_ip: 2.2.2.2}]\n",
             "unknown vnic 7");
  fails_with(head + "vnics: [{id: 1, ip: 1.2.3.4, vni: 1}]\negress: [{vnic: 1, remote_ip: 1.1.1.1, underlay_ip: 2.2.2.2, paths: 0}]\n",
             "'paths'");
  std::filesystem::remove(path);
}

TEST_CASE("registered application memory becomes DPDK external memory while an MR holds it") {
  constexpr std::size_t kLen = 256 * 1024;
  void* mem = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  {
    DmaRegistry dma(0);  // net_null0: no DMA of its own
    dma.add(mem, kLen, false);
    CHECK(dma.counters().failed == 0);
    CHECK(dma.counters().live == 1);
    // --no-huge runs in IOVA-as-VA mode: the vdev bus accepts the map as a no-op.
    CHECK(dma.counters().mapped == 1);
    rte_memseg_list* msl = rte_mem_virt2memseg_list(static_cast<uint8_t*>(mem) + 4096);
    REQUIRE(msl != nullptr);
    CHECK(msl->external != 0);
    dma.remove(mem);
    CHECK(dma.counters().live == 0);
    CHECK(dma.counters().unmapped == 1);
    CHECK(rte_mem_virt2memseg_list(mem) == nullptr);
    dma.add(mem, kLen, false);  // the registry's destructor releases what is left
  }
  CHECK(rte_mem_virt2memseg_list(mem) == nullptr);
  munmap(mem, kLen);
}

int main(int argc, char** argv) {
  const std::string prefix = "tandem-rnic-parts-" + std::to_string(getpid());
  try {
    common::dpdk::eal_init("rnic_worker_parts_test", {"--no-huge", "--no-pci", "-l", "0", "-m", "64",
                                                       "--file-prefix=" + prefix, "--log-level=error", "--vdev=net_null0"});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  const int rc = Catch::Session().run(argc, argv);
  common::dpdk::eal_cleanup();
  std::error_code ec;
  std::filesystem::remove_all("/var/run/dpdk/" + prefix, ec);
  return rc;
}

// Finding "virtio ports: zero-copy transmit delivers nothing": the vhost-user backend of a
// virtio-user port cannot map application memory, so such ports copy, and say why.
TEST_CASE("transmit payloads are copied on ports that cannot read application memory") {
  using tandem::rnic::dpdk::choose_tx_payload_mode;
  CHECK(choose_tx_payload_mode("net_memif", false, false).zero_copy);
  CHECK(choose_tx_payload_mode("net_pcap", false, false).zero_copy);
  CHECK(choose_tx_payload_mode("mlx5_pci", false, false).zero_copy);
  CHECK(choose_tx_payload_mode("net_ice", false, true).zero_copy);  // DMA-mapped in IOVA-as-VA mode
  const auto vu = choose_tx_payload_mode("net_virtio_user", false, true);
  CHECK_FALSE(vu.zero_copy);
  CHECK(vu.why.find("vhost-user") != std::string::npos);
  CHECK_FALSE(choose_tx_payload_mode("net_virtio", false, true).zero_copy);
  CHECK_FALSE(choose_tx_payload_mode("net_ice", false, false).zero_copy);  // no IOVA for app memory
  CHECK_FALSE(choose_tx_payload_mode("net_memif", true, false).zero_copy);  // --tx-copy
}
