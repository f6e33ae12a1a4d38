// tx-pipeline: the tandem-rnic transmit path on one lcore, in process:
// WRITE work request -> core segments it (IRN placement header, PSN, path)
// -> egress route (the level-2 table entry, resolved once per QP and table
// version, as the worker does) -> path set -> TxEncap (Ethernet/IPv4/UDP/
// BTH/RETH/XETH, payload, chained ICRC) -> rte_eth_tx_burst on net_null. The
// peer's ACKs are synthesised every 32 packets per QP (every 32 KiB above MTU
// 1024; as parsed RocePackets) so the window keeps moving; completions are reaped.
//
// Two more modes put the pipeline's number in context, same frames, same
// port:
//   --floor       what any sender of these frames does per packet with no
//                 transport: a header mbuf (alloc_bulk), the frame's headers
//                 copied from a prebuilt block, PSN / IPv4 length, id and
//                 checksum / UDP port and length patched, the payload copied,
//                 the ICRCs of a burst, tx_burst. The pipeline cannot beat it.
//   --encap-only  TxEncap::build from a descriptor the bench keeps (PSN and
//                 payload address change), through the QP's egress route: the
//                 I/O layer's share without the transport core.
// --lcores N runs the same pipeline on N EAL lcores at once, each with its
// own state as a sharded worker's lcore has it (its Transport and QPs, its
// net_null TX queue, its egress routes, TxEncap, tracer and memory), sharing
// only the mbuf pools (per-lcore caches) and the read-only level-2 table.
// Prints one JSON line: mode, packets, seconds, mpps, CPU ns per packet, frame
// bytes; with several lcores, packets and mpps are the sum over the lcores
// (over the longest lcore's wall time) and lcore_mpps the lcores' own rates.
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_memcpy.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/dpdk/eal.h"
#include "common/dpdk/port.h"
#include "common/dpdk/tsc_clock.h"
#include "benchmarks/common/multi_lcore.h"
#include "common/wire/byte_order.h"
#include "common/wire/entropy.h"
#include "common/wire/icrc.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/credit_wire.h"
#include "rnic/core/frame.h"
#include "rnic/core/path_set.h"
#include "rnic/core/policy_factory.h"
#include "rnic/core/transport.h"
#include "rnic/port/egress_route.h"
#include "rnic/dpdk/tx_encap.h"
#include "common/trace/trace_file.h"
#include "rnic/port/trace_flags.h"
#include "rnic/port/tx_trace.h"
#include "rnic/table/level2_table.h"

using namespace tandem;
using namespace tandem::rnic;

namespace {

constexpr uint16_t kBurst = 32;
constexpr uint32_t kQpnBase = 0x100;
constexpr uint32_t kRemoteQpnBase = 0x10000;
constexpr uint64_t kRemoteVa = 0x7f0000000000;
constexpr uint32_t kRkey = 0x1234;
constexpr uint32_t kLkey = 0x101;  // the local region's key (TxEncap pins its slot)
constexpr uint32_t kMaxPostList = 256;

// CPU time of this thread as well as wall time: on shared cores the
// wall-clock rate also counts time the scheduler gave to others.
uint64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

struct Tally {
  uint64_t sent = 0;
  uint64_t not_sent = 0;
  uint32_t frame_bytes = 0;  // of the first frame (all are alike)
  uint16_t queue = 0;        // the lcore's TX queue
};

// What one lcore did, for main to sum once all have stopped (cache lines
// of its own: no lcore writes near another's).
struct alignas(64) LcoreResult {
  Tally tally;
  double secs = 0, cpu_secs = 0;
  rnic::dpdk::EncapCounters counters{};
  uint64_t trace_records = 0;
  const char* error = nullptr;  // a frame check failed
};

// Sends what is in the burst; what the port did not take is freed and counted.
void flush(rte_mbuf** burst, uint16_t& nb, Tally& t) noexcept {
  if (nb == 0) return;
  const uint16_t s = rte_eth_tx_burst(0, t.queue, burst, nb);
  t.sent += s;
  if (s < nb) {
    t.not_sent += nb - s;
    rte_pktmbuf_free_bulk(burst + s, nb - s);
  }
  nb = 0;
}

// QP 0's descriptor for a one-packet IRN WRITE, as Qp::tx_requests fills it.
TxDesc write_desc(const uint8_t* data, uint32_t len) noexcept {
  TxDesc d;
  d.bth.opcode = IBV_OPCODE_RC_RDMA_WRITE_ONLY;
  d.bth.ack_req = true;
  d.bth.dqpn = kRemoteQpnBase;
  d.local_qpn = kQpnBase;
  d.remote_qpn = kRemoteQpnBase;
  d.peer = 0xC0A80002;
  d.reth = common::Reth{kRemoteVa, kRkey, len};
  d.has_xeth = true;
  d.xeth = Xeth{0, 0, len, kRkey, kRemoteVa};
  d.payload_len = len;
  d.num_segs = 1;
  d.segs[0] = TxSeg{data, len, kLkey};  // a registered region's bytes (zero-copy when large)
  d.udp_sport = common::kEntropyPortBase;
  return d;
}

// The floor: the frames the pipeline sends (same headers, RETH and XETH,
// same length), made with only the per-packet work any RoCEv2 sender has.
struct Floor {
  static constexpr uint32_t kCopy = 96;  // header bytes copied (>= hdr_len, rounded)
  alignas(64) uint8_t hdr[kCopy] = {};
  uint32_t hdr_len = 0;
  uint32_t ip_sum = 0;  // of the IPv4 words constant per packet
  uint32_t pad = 0;
};

constexpr uint32_t kIp = common::kEthHdrLen;
constexpr uint32_t kUdp = kIp + common::kIpv4HdrLen;
constexpr uint32_t kBth = kUdp + common::kUdpHdrLen;

Floor make_floor(const TxDesc& d, const FrameAddrs& fa) {
  Floor f;
  std::vector<uint8_t> frame(4096);
  const std::size_t n = build_frame(d, fa, frame.data(), frame.size());
  f.pad = common::roce_pad(d.wire_payload_len());
  f.hdr_len = static_cast<uint32_t>(n - d.payload_len - f.pad - common::kIcrcLen);
  if (n == 0 || f.hdr_len > Floor::kCopy) {
    std::fprintf(stderr, "tx_pipeline_bench: floor: unexpected frame layout\n");
    std::exit(2);
  }
  std::memcpy(f.hdr, frame.data(), f.hdr_len);
  common::store_be32(f.hdr + kIp + 2, 0);   // length, id: per packet
  common::store_be16(f.hdr + kIp + 10, 0);  // checksum: per packet
  for (uint32_t i = 0; i < common::kIpv4HdrLen; i += 2) f.ip_sum += common::load_be16(f.hdr + kIp + i);
  return f;
}

// One floor frame into `m`; returns the ICRC job (IPv4 header, bytes covered).
[[gnu::always_inline]] inline uint32_t floor_frame(const Floor& f, rte_mbuf* m, const uint8_t* payload, uint32_t len,
                                                   uint32_t psn, uint16_t id, uint16_t sport,
                                                   const uint8_t*& ip_out) noexcept {
  uint8_t* base = rte_pktmbuf_mtod(m, uint8_t*);
  rte_memcpy(base, f.hdr, Floor::kCopy);
  const uint32_t frame_len = f.hdr_len + len + f.pad + common::kIcrcLen;
  const uint32_t ip_len = frame_len - common::kEthHdrLen;
  uint8_t* ip = base + kIp;
  common::store_be32(ip + 2, ip_len << 16 | id);
  uint32_t sum = f.ip_sum + ip_len + id;
  sum = (sum & 0xFFFF) + (sum >> 16);
  sum = (sum & 0xFFFF) + (sum >> 16);
  common::store_be16(ip + 10, static_cast<uint16_t>(~sum));
  common::store_be64(base + kUdp, uint64_t{sport} << 48 | uint64_t{common::kRoceUdpPort} << 32 |
                                      uint64_t{ip_len - common::kIpv4HdrLen} << 16);
  common::store_be32(base + kBth + 8, 0x80000000u | (psn & 0xFFFFFFu));  // ack-req, PSN
  uint8_t* p = base + f.hdr_len;
  rte_memcpy(p, payload, len);
  std::memset(p + len, 0, 4);  // pad and the ICRC's place
  m->data_len = static_cast<uint16_t>(frame_len);
  m->pkt_len = frame_len;
  ip_out = ip;
  return ip_len - common::kIcrcLen;
}

// The floor frame must be the pipeline's frame: the bytes build_frame makes
// for the same descriptor, but for the IPv4 id (build_frame's is 0), the IPv4
// checksum and the ICRC that cover it; and it must parse with both checked.
bool floor_frame_ok(rte_mbuf* m, TxDesc d, const FrameAddrs& fa, uint32_t psn, uint16_t sport) {
  const uint8_t* got = rte_pktmbuf_mtod(m, const uint8_t*);
  const uint32_t len = rte_pktmbuf_data_len(m);
  common::RocePacket pkt;
  if (common::parse_roce(got, len, pkt) != common::DropReason::kNone) return false;
  d.bth.psn = psn;
  d.udp_sport = sport;
  std::vector<uint8_t> want(4096);
  want.resize(build_frame(d, fa, want.data(), want.size()));
  if (want.size() != len) return false;
  for (uint32_t i = 0; i + common::kIcrcLen < len; ++i) {
    const bool variant = i == kIp + 4 || i == kIp + 5 || i == kIp + 10 || i == kIp + 11;
    if (!variant && got[i] != want[i]) return false;
  }
  return true;
}

// A pipeline frame as the port gets it (mbuf chain: headers, attached
// payload, pad and ICRC): it must parse, IPv4 checksum and ICRC checked,
// addressed to one of the bench's n_qps remote QPs.
bool pipeline_frame_ok(const rte_mbuf* m, uint32_t n_qps) {
  std::vector<uint8_t> buf(rte_pktmbuf_pkt_len(m));
  const auto* p = static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, static_cast<uint32_t>(buf.size()), buf.data()));
  common::RocePacket pkt;
  return p != nullptr && common::parse_roce(p, buf.size(), pkt) == common::DropReason::kNone && pkt.icrc_checked &&
         pkt.bth.dqpn - kRemoteQpnBase < n_qps;
}

}  // namespace

int main(int argc, char** argv) {
  std::string trace_mode = "none", path_policy = "round_robin", cc_policy = "credit";
  double seconds = 3;
  uint32_t n_paths = 4;
  uint32_t lcores = 1, mtu = 1024;
  uint32_t payload = 64, n_qps = 4, txq = 1024, cq_size = 1 << 16, depth = 256, signal_every = 1, post_list = 1;
  bool copy = false, gbn = false, floor = false, encap_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--payload" && i + 1 < argc) payload = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--qps" && i + 1 < argc) n_qps = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--txq" && i + 1 < argc) txq = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--cq" && i + 1 < argc) cq_size = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--outstanding" && i + 1 < argc) depth = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--signal-every" && i + 1 < argc) signal_every = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--post-list" && i + 1 < argc) post_list = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--lcores" && i + 1 < argc) lcores = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--mtu" && i + 1 < argc) mtu = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--tx-copy") copy = true;
    else if (a == "--gbn") gbn = true;
    else if (a == "--floor") floor = true;
    else if (a == "--encap-only") encap_only = true;
    else if (a == "--trace" && i + 1 < argc) trace_mode = argv[++i];
    else if (a == "--path" && i + 1 < argc) path_policy = argv[++i];
    else if (a == "--cc" && i + 1 < argc) cc_policy = argv[++i];
    else if (a == "--paths" && i + 1 < argc) n_paths = static_cast<uint32_t>(std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: tx_pipeline_bench [--seconds S] [--payload B] [--qps N] [--tx-copy] [--gbn]\n"
                   "         [--txq N (core TX queue, 1024)] [--cq N (CQ entries, 65536)]\n"
                   "         [--outstanding N (WRs posted per QP, 256)]\n"
                   "         [--signal-every N (IBV_SEND_SIGNALED on one WR in N per QP, as perftest's --cq-mod; 1)]\n"
                   "         [--post-list N (WRs per post_send call, as perftest's --post_list; 1)]\n"
                   "         [--floor (no transport: template, patch, copy, ICRC, tx_burst)]\n"
                   "         [--encap-only (TxEncap::build from a kept descriptor, no transport)]\n"
                   "         [--trace none|off|nomatch|match (the worker's tracer: none, no rule, a rule matching\n"
                   "          nothing, every packet)]\n"
                   "         [--path POLICY (spraying: single|round_robin|adaptive; round_robin, the lab's)]\n"
                   "         [--cc POLICY (fixed_window|credit|dcqcn; credit, the lab's: the synthesised ACKs grant)]\n"
                   "         [--paths N (path set size, 4)]\n"
                   "         [--lcores N (the same pipeline, own state and TX queue, on N lcores at once; 1)]\n"
                   "         [--mtu 256|512|1024|2048|4096 (the QPs' path MTU: payload per packet; 1024)]\n");
      return 2;
    }
  }
  if (payload == 0 || payload > 1 << 20 || n_qps == 0 || n_qps > 64 || (floor && encap_only) || depth == 0 ||
      signal_every == 0 || signal_every > depth || post_list == 0 || post_list > kMaxPostList || lcores == 0 ||
      lcores > 16) {
    std::fprintf(stderr, "tx_pipeline_bench: bad arguments (payload 1..1 MiB, qps 1..64, one mode, "
                 "signal-every 1..outstanding, post-list 1..%u, lcores 1..16)\n", kMaxPostList);
    return 2;
  }
  if (!make_path_policy(path_policy.c_str()) || !make_cc_policy(cc_policy.c_str()) || n_paths == 0 ||
      n_paths > kMaxPaths) {
    std::fprintf(stderr, "tx_pipeline_bench: unknown --path or --cc policy, or --paths not 1..%u\n", kMaxPaths);
    return 2;
  }
  if (mtu != 256 && mtu != 512 && mtu != 1024 && mtu != 2048 && mtu != 4096) {
    std::fprintf(stderr, "tx_pipeline_bench: --mtu 256|512|1024|2048|4096\n");
    return 2;
  }
  if (copy && mtu > 1024) {
    std::fprintf(stderr, "tx_pipeline_bench: --tx-copy frames must fit one mbuf (--mtu up to 1024)\n");
    return 2;
  }
  if ((floor || encap_only) && payload > 1024) {
    std::fprintf(stderr, "tx_pipeline_bench: --floor and --encap-only send one-packet WRITEs (payload <= 1024)\n");
    return 2;
  }
  const std::string prefix = "tandem-txbench-" + std::to_string(getpid());
  if (trace_mode != "none" && trace_mode != "off" && trace_mode != "nomatch" && trace_mode != "match") {
    std::fprintf(stderr, "tx_pipeline_bench: --trace none|off|nomatch|match\n");
    return 2;
  }
  const bool traced = trace_mode != "none";
  const bool rearm = trace_mode == "nomatch" || trace_mode == "match";
  common::trace::Rule rule;
  if (trace_mode == "nomatch") rule.ip_a = 0x01020304;  // no packet here comes from or goes to 1.2.3.4
  if (lcores > bench::usable_cpus()) {
    std::fprintf(stderr, "tx_pipeline_bench: --lcores %u but this process may run on %u CPUs\n", lcores, bench::usable_cpus());
    return 2;
  }
  common::dpdk::eal_init("tx_pipeline_bench", {"--no-huge", "--no-pci", "-l", bench::lcore_list(lcores), "-m", "256",
                                               "--file-prefix=" + prefix, "--log-level=error", "--vdev=net_null0"});
  if (rte_lcore_count() < lcores) {
    std::fprintf(stderr, "tx_pipeline_bench: --lcores %u but the EAL has %u lcores\n", lcores, rte_lcore_count());
    return 2;
  }
  // Shared by the lcores, as the worker's are: the pools (each lcore takes
  // from its own cache) and the port (each lcore has its TX queue).
  rte_mempool* pool = rte_pktmbuf_pool_create("tx_hdr", 8191 * lcores, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
  rte_mempool* ext = rte_pktmbuf_pool_create("tx_ext", 8191 * lcores, 256, 0, 0, 0);
  bench::port_setup_queues(0, pool, static_cast<uint16_t>(lcores));

  // Level-2 table: vNIC 1 -> remote 192.168.0.2 behind 10.0.0.2, 4 paths.
  Level2Table table(Level2TableConfig{64});
  common::EgressAction ea;
  ea.underlay_src_ip = 0x0A000001;
  ea.underlay_dst_ip = 0x0A000002;
  ea.dst_mac = {2, 0, 0, 0, 0, 0xfe};
  ea.vni = 100;
  ea.path_base_port = common::kEntropyPortBase;
  ea.path_count = 4;
  table.begin();
  table.put(common::make_egress_entry(common::egress_key(1, 0xC0A80002), ea));
  table.commit();

  const char* mode = floor ? "floor" : encap_only ? "encap-only" : "pipeline";
  std::vector<LcoreResult> results(lcores);
  bench::StartLine start(lcores);
  // One lcore's pipeline; everything it writes per packet is its own.
  auto run_lcore = [&](uint32_t li) {
    LcoreResult& res = results[li];
    // The worker's tracer over an in-memory ring of the worker's size.
    std::vector<uint64_t> ring_mem(common::trace::ring_bytes(common::trace::kDefaultCapacity) / 8 + 1);
    common::trace::Tracer tracer;
    tracer.attach(common::trace::ring_init(ring_mem.data(), common::trace::kDefaultCapacity, 0, "bench"));
    std::vector<uint8_t> mem(1 << 20, 0x5A);
    auto encap = std::make_unique<rnic::dpdk::TxEncap>(pool, ext, copy);
    common::dpdk::TscClock clock;
    const common::MacAddr src_mac = {2, 0, 0, 0, 0, 1};
    const std::vector<std::vector<uint16_t>> no_path_sets;
    std::vector<rnic::port::EgressRoute> routes(n_qps);
    // The trace rule compiled into each QP's flags, as PortLogic does when its
    // lcore adopts a rule and whenever it resolves a QP's route.
    std::vector<rnic::port::TraceFlags> trace_flags(n_qps);
    bool tx_flags = false;  // PortLogic::trace_tx_flags_: some QP's TX flag set since the rule
    auto compile_flags = [&](uint32_t qi) {
      trace_flags[qi] = routes[qi].version == rnic::port::EgressRoute::kUnresolved
                            ? rnic::port::TraceFlags{}
                            : rnic::port::compile_trace_flags(tracer, ea.underlay_src_ip, routes[qi], 0);
      tx_flags |= trace_flags[qi].tx;
    };
    rte_mbuf* burst[kBurst];
    uint16_t nb = 0;
    Tally tally;  // on this lcore's stack, into res when it stops
    tally.queue = static_cast<uint16_t>(li);
    bool checked = false;  // the lcore's first frame checked
    const uint32_t slots = static_cast<uint32_t>(mem.size() / 64 - (payload + 63) / 64);  // payload addresses

    uint64_t cpu0 = 0, t0 = 0;
    if (floor || encap_only) {
      const TxDesc proto = write_desc(mem.data(), payload);
      FrameAddrs fa;
      fa.src_mac = src_mac;
      fa.dst_mac = ea.dst_mac;
      fa.src_ip = ea.underlay_src_ip;
      fa.dst_ip = ea.underlay_dst_ip;
      const Floor f = make_floor(proto, fa);
      rnic::port::EgressRoute& r = routes[0];
      const Level2Table::Snapshot snap = table.begin_read();
      r.resolve(table.lookup(snap, common::egress_key(1, proto.peer))->egress, src_mac, no_path_sets, snap.version,
                proto.peer);
      TxDesc d = proto;
      const uint8_t* ips[kBurst];
      std::size_t lens[kBurst];
      uint32_t icrc[kBurst];
      uint32_t psn = 0;
      uint16_t ip_id = 0;
      start.wait();
      cpu0 = thread_cpu_ns();
      t0 = clock.now_ns();
      const uint64_t end = t0 + static_cast<uint64_t>(seconds * 1e9);
      // The clock is read once a burst, as the pipeline's loop reads it once a round.
      for (uint64_t iter = 0; clock.now_ns() < end;) {
        if (floor) {
          if (rte_pktmbuf_alloc_bulk(pool, burst, kBurst) != 0) continue;
          for (uint16_t k = 0; k < kBurst; ++k, ++iter) {
            const uint16_t sport = static_cast<uint16_t>(common::kEntropyPortBase + (psn & 3));
            lens[k] = floor_frame(f, burst[k], mem.data() + (iter % slots) * 64, payload, psn, ip_id++, sport, ips[k]);
            psn = (psn + 1) & 0xFFFFFF;
          }
          common::roce_icrc_burst(ips, lens, icrc, kBurst);
          for (uint16_t k = 0; k < kBurst; ++k) common::store_le32(const_cast<uint8_t*>(ips[k]) + lens[k], icrc[k]);
          if (!checked) {
            if (!floor_frame_ok(burst[0], proto, fa, 0, common::kEntropyPortBase)) {
              res.error = "floor frame differs from build_frame's";
              rte_pktmbuf_free_bulk(burst, kBurst);
              break;
            }
            checked = true;
          }
          nb = kBurst;
        } else {
          for (uint16_t k = 0; k < kBurst; ++k, ++iter) {
            d.bth.psn = psn;
            d.segs[0].data = mem.data() + (iter % slots) * 64;
            d.udp_sport = static_cast<uint16_t>(common::kEntropyPortBase + (psn & 3));
            psn = (psn + 1) & 0xFFFFFF;
            if (rte_mbuf* m = encap->build(d, r.tmpl_for(d.bth.dqpn), r.sport(d.udp_sport), true)) burst[nb++] = m;
          }
          encap->finish();
          if (!checked && nb) {
            if (!pipeline_frame_ok(burst[0], n_qps)) {
              res.error = "encap-only frame does not parse (checksum, ICRC) or has the wrong QP";
              rte_pktmbuf_free_bulk(burst, nb);
              break;
            }
            checked = true;
          }
        }
        if (tally.frame_bytes == 0 && nb) tally.frame_bytes = rte_pktmbuf_pkt_len(burst[0]);
        flush(burst, nb, tally);
      }
    } else {
      Transport core(TransportConfig{64, kQpnBase, 8, 4, txq});
      const MemoryRegion mr = core.reg_mr(mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
      const uint32_t cq = core.create_cq(cq_size);
      std::vector<uint32_t> qpns;
      for (uint32_t i = 0; i < n_qps; ++i) {
        QpInitAttr init;
        init.send_cq = cq;
        init.recv_cq = cq;
        init.sq_depth = 512;
        init.mode = gbn ? Reliability::kGoBackN : Reliability::kIrn;
        init.policy.path = path_policy.c_str();
        init.policy.cc = cc_policy.c_str();
        init.policy.num_paths = n_paths;
        const uint32_t q = core.create_qp(init);
        QpAttr a;
        a.state = QpState::kInit;
        core.modify_qp(q, a, IBV_QP_STATE);
        a.state = QpState::kRtr;
        a.path_mtu = mtu;
        a.dest_qp_num = kRemoteQpnBase + i;
        a.peer = 0xC0A80002;
        a.path_seed = static_cast<uint16_t>(i * 7919);
        core.modify_qp(q, a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_AV);
        a.state = QpState::kRts;
        a.timeout_ns = 1'000'000'000;  // no retransmission: ACKs are synthesised in time
        core.modify_qp(q, a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT);
        qpns.push_back(q);
      }
      // Per QP: WRs posted, and WRs known complete (a completion's wr_id is
      // its WR's ordinal on the QP; it completes every WR before it, signalled
      // or not, as verbs applications count with selective signalling).
      const uint32_t ack_every = 32 * 1024 / std::max<uint32_t>(mtu, 1024);
    std::vector<uint64_t> posted(n_qps, 0), done(n_qps, 0);
      std::vector<uint32_t> since_ack(n_qps, 0), last_psn(n_qps, 0), unsignalled(n_qps, 0);
      Completion wc[64];
      std::vector<SendWr> list(post_list);
      for (SendWr& wr : list) {
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.remote_addr = kRemoteVa;
        wr.rkey = kRkey;
        wr.num_sge = 1;
        wr.sg_list[0] = Sge{reinterpret_cast<uint64_t>(mem.data()), payload, mr.lkey};
      }
      start.wait();
      cpu0 = thread_cpu_ns();
      t0 = clock.now_ns();
      const uint64_t end = t0 + static_cast<uint64_t>(seconds * 1e9);
      uint64_t now = t0;
      for (uint64_t iter = 0; now < end; ++iter) {
        now = clock.now_ns();
        if (rearm && !tracer.active()) [[unlikely]] {  // a match-all rule fills the ring and stops: again
          tracer.request(rule);
          tracer.poll(now);
          tx_flags = false;
          for (uint32_t i = 0; i < n_qps; ++i) compile_flags(i);
        }
        // The application's side: WRs reused (as a verbs program reuses its
        // ibv_send_wr), only the id, buffer and flags change; --post-list of
        // them per call (one: the single-WR post_send).
        for (uint32_t i = 0; i < n_qps; ++i) {
          const uint64_t limit = done[i] + depth;
          uint64_t seq = posted[i];
          uint32_t countdown = unsignalled[i];
          auto fill = [&](SendWr& wr) {
            wr.wr_id = seq;
            wr.send_flags = ++countdown == signal_every ? IBV_SEND_SIGNALED : 0;  // a countdown, not a division
            if (countdown == signal_every) countdown = 0;
            wr.sg_list[0].addr = reinterpret_cast<uint64_t>(mem.data()) + (seq % 1024) * 64;
          };
          if (post_list == 1) {
            SendWr& wr = list[0];
            for (; seq < limit; ++seq) {
              const uint32_t before = countdown;
              fill(wr);
              if (core.post_send(qpns[i], wr) != 0) {
                countdown = before;
                break;
              }
            }
          } else {
            while (seq < limit) {
              const uint32_t k = static_cast<uint32_t>(std::min<uint64_t>(post_list, limit - seq));
              const uint32_t before = countdown;
              for (uint32_t j = 0; j < k; ++j, ++seq) fill(list[j]);
              seq -= k;
              uint32_t ok = 0;
              const int rc = core.post_send(qpns[i], list.data(), k, &ok);
              seq += ok;
              if (rc != 0) {
                countdown = static_cast<uint32_t>((before + ok) % signal_every);
                break;
              }
            }
          }
          posted[i] = seq;
          unsignalled[i] = countdown;
        }
        // As the worker's loop: poll and drain again while the core stopped
        // for a full TX queue (--txq), at most 8 rounds.
        for (int round = 0; round < 8; ++round) {
          core.poll(now);
          const Level2Table::Snapshot snap = table.begin_read();
          TxQueue& tx = core.tx();
          bool tracing = traced && tx_flags && tracer.active();
          while (!tx.empty()) {
            const TxDesc& d = tx.front();
            const uint32_t qi = d.local_qpn - kQpnBase;
            rnic::port::EgressRoute& r = routes[qi];
            const Level2Entry* e = nullptr;
            if (r.fresh(snap.version, d.peer) ||
                ((e = table.lookup(snap, common::egress_key(1, d.peer))) != nullptr &&
                 (r.resolve(e->egress, src_mac, no_path_sets, snap.version, d.peer), compile_flags(qi),
                  tracing = traced && tx_flags && tracer.active(), true)))
              if (rte_mbuf* m = encap->build(d, r.tmpl_for(d.bth.dqpn), r.sport(d.udp_sport), true)) {
                burst[nb++] = m;
                if (tally.frame_bytes == 0) tally.frame_bytes = rte_pktmbuf_pkt_len(m);
                if (tracing && trace_flags[qi].tx) [[unlikely]]
                  rnic::port::trace_tx(tracer, d, r, r.sport(d.udp_sport), encap->last_ip_id(),
                                       [&clock] { return clock.now_ns(); });
              }
            last_psn[qi] = d.bth.psn;
            ++since_ack[qi];
            tx.pop();
            if (nb == kBurst) {
              encap->finish();
              if (!checked) [[unlikely]] {
                if (!pipeline_frame_ok(burst[0], n_qps))
                  res.error = "pipeline frame does not parse (checksum, ICRC) or has the wrong QP";
                checked = true;
              }
              flush(burst, nb, tally);
            }
          }
          if (!core.pending()) break;
        }
        // The peer's cumulative ACKs, every 32 packets (32 KiB above MTU 1024:
        // a credit QP's unscheduled window is in bytes, 16 packets at 4096).
        for (uint32_t i = 0; i < n_qps; ++i) {
          if (since_ack[i] < ack_every) continue;
          common::RocePacket ack;
          ack.ip.src = 0x0A000002;
          ack.ip.dst = 0x0A000001;
          ack.bth.opcode = IBV_OPCODE_RC_ACKNOWLEDGE;
          ack.bth.dqpn = qpns[i];
          ack.bth.psn = last_psn[i];
          // Credit QPs: the grant of a receiver that takes all (limit = PSN + 1
          // + 512, past what the bench keeps posted); others: no credit field.
          ack.aeth.syndrome = cc_policy == "credit" ? credit_encode(512) : 0x1F;
          core.on_packet(ack, nullptr, 0, now);
          since_ack[i] = 0;
        }
        uint32_t n;
        while ((n = core.poll_cq(cq, wc, 64)) > 0)
          for (uint32_t k = 0; k < n; ++k) done[wc[k].qp_num - kQpnBase] = wc[k].wr_id + 1;
      }
      encap->finish();
      flush(burst, nb, tally);
    }
    res.tally = tally;
    res.secs = static_cast<double>(clock.now_ns() - t0) / 1e9;
    res.cpu_secs = static_cast<double>(thread_cpu_ns() - cpu0) / 1e9;
    res.counters = encap->counters();
    res.trace_records = tracer.written();
    encap->release();
    encap.reset();
  };
  if (!bench::run_on_lcores(lcores, run_lcore)) {
    std::fprintf(stderr, "tx_pipeline_bench: cannot run on %u lcores\n", lcores);
    return 2;
  }
  // The sum over the lcores' common interval: their packets over the
  // longest lcore's wall time (they start together at the start line).
  uint64_t sent = 0, not_sent = 0, zero_copy_segs = 0, copied_bytes = 0, trace_records = 0;
  double secs = 0, cpu_secs = 0;
  std::string lcore_mpps;
  const char* error = nullptr;
  for (const LcoreResult& r : results) {
    sent += r.tally.sent;
    not_sent += r.tally.not_sent;
    zero_copy_segs += r.counters.zero_copy_segs;
    copied_bytes += r.counters.copied_bytes;
    trace_records += r.trace_records;
    secs = std::max(secs, r.secs);
    cpu_secs += r.cpu_secs;
    char one[32];
    std::snprintf(one, sizeof one, "%s%.4f", lcore_mpps.empty() ? "" : ", ", r.tally.sent / r.secs / 1e6);
    lcore_mpps += one;
    if (r.error && !error) error = r.error;
  }
  std::printf("{\"mode\": \"%s\", \"packets\": %lu, \"not_sent\": %lu, \"seconds\": %.3f, \"mpps\": %.4f, "
              "\"cpu_seconds\": %.3f, \"mpps_per_cpu_second\": %.4f, \"ns_per_packet_cpu\": %.1f, \"payload\": %u, "
              "\"qps\": %u, \"frame_bytes\": %u, \"zero_copy_segs\": %lu, \"copied_bytes\": %lu, "
              "\"signal_every\": %u, \"post_list\": %u, \"trace\": \"%s\", \"trace_records\": %lu, "
              "\"path\": \"%s\", \"cc\": \"%s\", \"paths\": %u, \"lcores\": %u, \"lcore_mpps\": [%s], "
              "\"mtu\": %u}\n",
              mode, static_cast<unsigned long>(sent), static_cast<unsigned long>(not_sent), secs,
              sent / secs / 1e6, cpu_secs, sent / cpu_secs / 1e6,
              cpu_secs * 1e9 / static_cast<double>(sent ? sent : 1), payload, n_qps, results[0].tally.frame_bytes,
              static_cast<unsigned long>(zero_copy_segs), static_cast<unsigned long>(copied_bytes), signal_every,
              post_list, trace_mode.c_str(), static_cast<unsigned long>(trace_records), path_policy.c_str(),
              cc_policy.c_str(), n_paths, lcores, lcore_mpps.c_str(), mtu);
  if (error) std::fprintf(stderr, "tx_pipeline_bench: %s\n", error);
  common::dpdk::port_close(0);
  common::dpdk::eal_cleanup();
  std::error_code ec;
  std::filesystem::remove_all("/var/run/dpdk/" + prefix, ec);
  return sent > 0 && error == nullptr ? 0 : 1;
}
