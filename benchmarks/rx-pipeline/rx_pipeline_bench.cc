// rx-pipeline: the tandem-rnic receive path on one lcore, in process. A real
// sender core produces IRN RDMA WRITE frames (built with build_frame, ICRC
// and all); they are replayed, sprayed-style reordered (adjacent pairs
// swapped), through: mbuf fill (what the PMD's DMA/memif copy does) ->
// the burst's headers parsed, then its ICRCs checked four at a time ->
// ingress check against the QP's route -> core
// on_packet (reorder window, placement into registered memory) -> core poll
// -> ACK/SACK encapsulation -> tx_burst on net_null. Each pass replays the
// same PSNs after resetting the receiving QP (RESET -> RTS). The receive
// passes and the tenant check are the worker's own code (rnic/dpdk/rx_stage.h).
// The floor in the same run: what any receiver that checks the ICRC must do,
// with the pipeline's own code for it: mbuf fill, the headers pass
// (Ethernet/IPv4/UDP/BTH/RETH) and the burst's ICRCs (RxStage::validate),
// free. The replayed frames are few enough (--frames, 4096 x 162 B = 0.66 MB)
// to stay in this core's L2, as net_null copy=1's single dummy frame stays
// in cache for testpmd: the fill costs us what it costs the baseline.
// --lcores N runs the same receive path on N EAL lcores at once, each with
// its own state as a sharded worker's lcore has it (receiver Transport and QP,
// registered memory, replayed frames, TxEncap, tracer, net_null TX queue for
// its ACKs), sharing only the mbuf pool (per-lcore caches) and the read-only
// level-2 table. Prints one JSON line; with several lcores, mpps and
// floor_mpps are sums over the lcores (over the longest lcore's wall time),
// lcore_mpps the lcores' own rates. --gbn: go-back-N QPs (a plain RoCE
// peer's), frames in order; --no-fused: the RX stage checks every ICRC before
// placement (the A/B of the core's crc32_copy placement, rnic/core/README.md "ICRC").
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/dpdk/eal.h"
#include "common/dpdk/port.h"
#include "common/dpdk/tsc_clock.h"
#include "benchmarks/common/multi_lcore.h"
#include "common/wire/entropy.h"
#include "common/wire/icrc.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/connect_rc.h"
#include "rnic/core/credit_wire.h"
#include "rnic/core/frame.h"
#include "rnic/core/path_health.h"
#include "rnic/core/policy_factory.h"
#include "rnic/core/transport.h"
#include "rnic/port/egress_route.h"
#include "rnic/dpdk/rx_stage.h"
#include "rnic/dpdk/tx_encap.h"
#include "common/trace/trace_file.h"
#include "rnic/port/trace_flags.h"
#include "rnic/port/tx_trace.h"
#include "rnic/table/level2_table.h"

using namespace tandem;
using namespace tandem::rnic;

namespace {

void connect(Transport& t, uint32_t qpn, uint32_t dest, uint32_t peer, bool reset, uint32_t mtu) {
  QpAttr a;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  a.path_mtu = mtu;
  a.dest_qp_num = dest;
  a.peer = peer;
  a.timeout_ns = 1'000'000'000;
  connect_rc(t, qpn, a, reset);
}

// One measured phase (floor or pipeline) of one lcore, or their sum.
struct Phase {
  uint64_t pkts = 0, accepted = 0, acks = 0;
  double secs = 0, cpu_ns = 0;
  double mpps() const noexcept { return secs > 0 ? static_cast<double>(pkts) / secs / 1e6 : 0.0; }
  double cpu_per_pkt() const noexcept { return pkts ? cpu_ns / static_cast<double>(pkts) : 0.0; }
};

// What one lcore did, for main to sum once all have stopped (cache lines of
// its own: no lcore writes near another's).
struct alignas(64) LcoreResult {
  Phase floor, pipeline;
  double reset_ns = 0;
  uint64_t dropped = 0, trace_records = 0;
  uint32_t frame_bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  uint32_t payload = 64, n_frames = 0;  // 0: as many as fit in kReplayBytes
  bool control = true;
  bool gbn = false;    // --gbn: go-back-N QPs, frames in order (a plain RoCE peer's stream)
  bool fused = true;   // --no-fused: the RX stage checks every ICRC itself (no crc32_copy placement)
  std::string trace_mode = "none";  // trace units: none (no trace code path), off, nomatch, match
  std::string path_policy = "round_robin", cc_policy = "credit";  // the lab's
  uint32_t n_paths = 4, lcores = 1, mtu = 1024;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--trace" && i + 1 < argc) {
      trace_mode = argv[++i];
      continue;
    }
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--payload" && i + 1 < argc) payload = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--frames" && i + 1 < argc) n_frames = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--no-control") control = false;  // the pipeline alone, no floor (for perf record)
    else if (a == "--gbn") gbn = true;
    else if (a == "--no-fused") fused = false;
    else if (a == "--path" && i + 1 < argc) path_policy = argv[++i];
    else if (a == "--cc" && i + 1 < argc) cc_policy = argv[++i];
    else if (a == "--paths" && i + 1 < argc) n_paths = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--lcores" && i + 1 < argc) lcores = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--mtu" && i + 1 < argc) mtu = static_cast<uint32_t>(std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: rx_pipeline_bench [--seconds S] [--payload B] [--frames N (even; default: 0.66 MB of frames)] [--no-control]\n"
                           "       [--trace none|off|nomatch|match (the worker's tracer: none, no rule, a rule matching nothing, every packet)]\n"
                           "       [--path single|round_robin|adaptive (round_robin)] [--cc fixed_window|credit|dcqcn (credit)]\n"
                           "       [--paths N (path set size, 4)]   (both ends' QPs; the lab's policies by default)\n"
                           "       [--lcores N (the same receive path, own state and queue, on N lcores at once; 1)]\n"
                           "       [--mtu 256|512|1024|2048|4096 (both QPs' path MTU: payload per packet; 1024)]\n"
                           "       [--gbn (go-back-N QPs, frames in order)] [--no-fused (every ICRC checked before placement)]\n");
      return 2;
    }
  }
  if (!make_path_policy(path_policy.c_str()) || !make_cc_policy(cc_policy.c_str()) || n_paths == 0 ||
      n_paths > kMaxPaths) {
    std::fprintf(stderr, "rx_pipeline_bench: unknown --path or --cc policy, or --paths not 1..%u\n", kMaxPaths);
    return 2;
  }
  if (trace_mode != "none" && trace_mode != "off" && trace_mode != "nomatch" && trace_mode != "match") {
    std::fprintf(stderr, "rx_pipeline_bench: --trace none|off|nomatch|match\n");
    return 2;
  }
  if (payload == 0 || payload > 65536 || lcores == 0 || lcores > 16 ||
      (mtu != 256 && mtu != 512 && mtu != 1024 && mtu != 2048 && mtu != 4096)) {
    std::fprintf(stderr, "rx_pipeline_bench: --payload 1..65536, --lcores 1..16, --mtu 256|512|1024|2048|4096\n");
    return 2;
  }
  // The replay array stays cache-resident (this core's L2 is 1 MiB), as the
  // baseline PMD's one dummy frame does: 4096 frames of 64 B WRITEs (frames
  // carry up to an MTU of payload: 4 KiB WRITEs at MTU 1024 are 4 frames).
  constexpr uint32_t kReplayBytes = 4096 * 162;
  const uint32_t frame_payload = std::min(payload, mtu);
  if (n_frames == 0)
    n_frames = std::max<uint32_t>(frame_payload > 1024 ? 128 : 512, kReplayBytes / (frame_payload + 98)) & ~1u;
  const std::string prefix = "tandem-rxbench-" + std::to_string(getpid());
  if (lcores > bench::usable_cpus()) {
    std::fprintf(stderr, "rx_pipeline_bench: --lcores %u but this process may run on %u CPUs\n", lcores, bench::usable_cpus());
    return 2;
  }
  common::dpdk::eal_init("rx_pipeline_bench", {"--no-huge", "--no-pci", "-l", bench::lcore_list(lcores), "-m", "256",
                                               "--file-prefix=" + prefix, "--log-level=error", "--vdev=net_null0"});
  if (rte_lcore_count() < lcores) {
    std::fprintf(stderr, "rx_pipeline_bench: --lcores %u but the EAL has %u lcores\n", lcores, rte_lcore_count());
    return 2;
  }
  // Shared by the lcores, as the worker's are: the pool (each lcore takes
  // from its own cache), the port (each lcore has its queue) and the table.
  // mbufs hold a whole frame, as a PMD's receive buffers do at this MTU.
  const auto data_room =
      static_cast<uint16_t>(std::max<uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE, RTE_PKTMBUF_HEADROOM + mtu + 256));
  rte_mempool* pool = rte_pktmbuf_pool_create("rx_pool", 8191 * lcores, 256, 0, data_room, 0);
  bench::port_setup_queues(0, pool, static_cast<uint16_t>(lcores));

  // The ingress and egress entries of vNIC 1's remote.
  Level2Table table(Level2TableConfig{64});
  common::IngressAction ia;
  ia.overlay_src_ip = 0xC0A80001;
  ia.vni = 100;
  ia.local_vnic_id = 1;
  common::EgressAction ea;
  ea.underlay_src_ip = 0x0A000002;
  ea.underlay_dst_ip = 0x0A000001;
  ea.path_base_port = common::kEntropyPortBase;
  ea.path_count = 4;
  table.begin();
  table.put(common::make_ingress_entry(common::ingress_key_vni(0x0A000001, 100), ia));
  table.put(common::make_egress_entry(common::egress_key(1, 0xC0A80001), ea));
  table.commit();
  const bool traced = trace_mode != "none";
  common::trace::Rule rule;
  if (trace_mode == "nomatch") rule.ip_a = 0x01020304;  // no packet here comes from or goes to 1.2.3.4
  // Registered memory is written in WRITE-sized strides (at least 1 KiB, as before).
  constexpr uint32_t kRmemBytes = 1 << 20;
  const uint32_t stride = std::max<uint32_t>(1024, (payload + 1023) / 1024 * 1024);

  std::vector<LcoreResult> results(lcores);
  bench::StartLine floor_start(lcores), pipeline_start(lcores);
  // One lcore's receive path; everything it writes per packet is its own.
  auto run_lcore = [&](uint32_t li) {
    LcoreResult& res = results[li];
    const auto queue = static_cast<uint16_t>(li);
    // Receiver: the core, its registered memory, its QP.
    Transport rx(TransportConfig{4, 0x100, 8, 4, 1024});
    std::vector<uint8_t> rmem(kRmemBytes);
    const MemoryRegion rmr = rx.reg_mr(rmem.data(), rmem.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    const uint32_t rcq = rx.create_cq(1 << 16);
    QpInitAttr init;
    init.send_cq = rcq;
    init.recv_cq = rcq;
    init.sq_depth = 512;
    init.policy.path = path_policy.c_str();
    init.policy.cc = cc_policy.c_str();
    init.policy.num_paths = n_paths;
    if (gbn) init.mode = Reliability::kGoBackN;
    const uint32_t rqpn = rx.create_qp(init);

    // Sender: produces the frames once.
    Transport tx(TransportConfig{4, 0x200, 8, 4, 1024});
    std::vector<uint8_t> smem(1 << 20, 0x33);
    const MemoryRegion smr = tx.reg_mr(smem.data(), smem.size(), IBV_ACCESS_LOCAL_WRITE);
    const uint32_t scq = tx.create_cq(1 << 16);
    init.send_cq = scq;
    init.recv_cq = scq;
    const uint32_t sqpn = tx.create_qp(init);
    connect(tx, sqpn, rqpn, 0xC0A80002, false, mtu);
    connect(rx, rqpn, sqpn, 0xC0A80001, false, mtu);
    std::vector<uint8_t> frames;
    std::vector<std::pair<uint32_t, uint32_t>> index;  // offset, length
    FrameAddrs fa;
    fa.src_ip = 0x0A000001;
    fa.dst_ip = 0x0A000002;
    uint32_t posted = 0, since_ack = 0, last_psn = 0;
    Completion wc[64];
    while (index.size() < n_frames) {
      while (posted - index.size() < 256) {
        SendWr wr;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.remote_addr = reinterpret_cast<uint64_t>(rmem.data()) + (posted % (kRmemBytes / stride)) * stride;
        wr.rkey = rmr.rkey;
        wr.num_sge = 1;
        wr.sg_list[0] = Sge{reinterpret_cast<uint64_t>(smem.data()), payload, smr.lkey};
        if (tx.post_send(sqpn, wr) != 0) break;
        ++posted;
      }
      tx.poll(0);
      while (!tx.tx().empty()) {
        const TxDesc& d = tx.tx().front();
        uint8_t buf[4096 + 256];
        const std::size_t n = build_frame(d, fa, buf, sizeof buf);
        index.emplace_back(static_cast<uint32_t>(frames.size()), static_cast<uint32_t>(n));
        frames.insert(frames.end(), buf, buf + n);
        last_psn = d.bth.psn;
        ++since_ack;
        tx.tx().pop();
      }
      if (since_ack) {
        common::RocePacket ack;
        ack.bth.opcode = IBV_OPCODE_RC_ACKNOWLEDGE;
        ack.bth.dqpn = sqpn;
        ack.bth.psn = last_psn;
        ack.aeth.syndrome = cc_policy == "credit" ? credit_encode(512) : 0x1F;  // a grant past what is posted
        tx.on_packet(ack, nullptr, 0, 0);
        since_ack = 0;
      }
      while (tx.poll_cq(scq, wc, 64) > 0) {
      }
    }
    index.resize(n_frames);
    if (!gbn)
      for (std::size_t i = 0; i + 1 < index.size(); i += 2) std::swap(index[i], index[i + 1]);  // sprayed arrival
    res.frame_bytes = index.empty() ? 0 : index[0].second;

    rnic::dpdk::TxEncap encap(pool, nullptr, true);
    common::dpdk::TscClock clock;

    // CPU time of this thread: on shared cores the wall-clock rate also counts
    // time the scheduler gave to other processes.
    auto cpu_ns = [] {
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
    };
    const std::vector<std::vector<uint16_t>> no_path_sets;
    // The worker's tracer over an in-memory ring of the worker's size.
    std::vector<uint64_t> ring_mem(common::trace::ring_bytes(common::trace::kDefaultCapacity) / 8 + 1);
    common::trace::Tracer tracer;
    tracer.attach(common::trace::ring_init(ring_mem.data(), common::trace::kDefaultCapacity, 0, "bench"));
    // The receiving QP as the worker holds it: bound to vNIC 1 and its remote,
    // the route resolved from the egress entry once per table version (as
    // Worker::fresh_route does, which also compiles the trace rule into the
    // QP's flags; there is no agent to punt a miss to here).
    struct BenchQp {
      bool routed = true;
      uint32_t vni = 100;
      uint16_t pkey = 0xFFFF;
      uint32_t vnic = 1;
      uint32_t remote_overlay = 0xC0A80001;
      uint32_t core_qpn = 0;
      rnic::port::EgressRoute route;
      rnic::port::TraceFlags trace;  // the rule compiled for this QP, as PortLogic does
    };
    BenchQp qp;
    qp.core_qpn = rqpn;
    constexpr uint32_t kLocalUnderlay = 0x0A000002;
    auto fresh_route = [&](BenchQp& q, uint32_t peer, const Level2Table::Snapshot& snap) -> rnic::port::EgressRoute* {
      if (q.route.fresh(snap.version, peer)) return &q.route;
      const Level2Entry* e = table.lookup(snap, common::egress_key(q.vnic, peer));
      if (e == nullptr) return nullptr;
      q.route.resolve(e->egress, common::MacAddr{}, no_path_sets, snap.version, peer);
      q.trace = rnic::port::compile_trace_flags(tracer, kLocalUnderlay, q.route, q.core_qpn);
      return &q.route;
    };
    rnic::dpdk::RxStage stage;
    stage.set_fused_icrc(fused);
    rnic::dpdk::WorkerCounters k;
    auto arm = [&] {  // per pass: a match-all rule would fill the ring and stop
      if (trace_mode == "nomatch" || trace_mode == "match") {
        tracer.request(rule);
        tracer.poll(clock.now_ns());
        // PortLogic::compile_trace: the lcore adopted a rule
        if (qp.route.version != rnic::port::EgressRoute::kUnresolved)
          qp.trace = rnic::port::compile_trace_flags(tracer, kLocalUnderlay, qp.route, qp.core_qpn);
      }
    };
    auto run = [&](bool full) {
      Phase ph;
      k = rnic::dpdk::WorkerCounters{};
      (full ? pipeline_start : floor_start).wait();
      const double c0 = cpu_ns();
      const uint64_t t0 = clock.now_ns(), end = t0 + static_cast<uint64_t>(seconds * 1e9);
      while (clock.now_ns() < end) {
        if (full) connect(rx, rqpn, sqpn, 0xC0A80001, true, mtu);
        if (full && traced) arm();
        for (std::size_t i = 0; i < index.size(); i += 32) {
          rte_mbuf* ms[32];
          const std::size_t n = std::min<std::size_t>(32, index.size() - i);
          if (rte_pktmbuf_alloc_bulk(pool, ms, static_cast<unsigned>(n)) != 0) return Phase{};
          for (std::size_t j = 0; j < n; ++j) {  // the PMD's copy into the mbuf
            std::memcpy(rte_pktmbuf_mtod(ms[j], uint8_t*), frames.data() + index[i + j].first, index[i + j].second);
            ms[j]->data_len = static_cast<uint16_t>(index[i + j].second);
            ms[j]->pkt_len = index[i + j].second;
          }
          const uint64_t now = clock.now_ns();
          ph.pkts += n;
          if (!full) {  // the floor: the pipeline's headers pass and burst ICRC check, nothing else
            k.rx_accepted += stage.validate(ms, static_cast<uint16_t>(n), k);
            rte_pktmbuf_free_bulk(ms, static_cast<unsigned>(n));
            continue;
          }
          // Worker::rx_port: the worker's receive passes and tenant check
          // (rx_stage.h); the worker also translates remote addresses through
          // the host interface, which this bench has not got (the core's MR is
          // the receive buffer itself).
          const Level2Table::Snapshot snap = table.begin_read();
          auto ingress = [&](common::RocePacket& pkt, uint8_t*, bool& traced_qp) noexcept {
            BenchQp* q = nullptr;
            const common::DropReason r = rnic::dpdk::check_ingress(
                pkt, kLocalUnderlay, table, snap,
                [&](uint32_t wire_qpn) { return wire_qpn == qp.core_qpn ? &qp : nullptr; },
                [&](BenchQp& b) -> const rnic::port::EgressRoute* { return fresh_route(b, b.remote_overlay, snap); },
                &q);
            if (r != common::DropReason::kNone) return r;
            pkt.bth.dqpn = q->core_qpn;
            traced_qp = q->trace.rx;
            return common::DropReason::kNone;
          };
          if (traced)
            stage.run(ms, static_cast<uint16_t>(n), rx, k, now, ingress, tracer);
          else
            stage.run(ms, static_cast<uint16_t>(n), rx, k, now, ingress);
          rte_pktmbuf_free_bulk(ms, static_cast<unsigned>(n));
          // Worker::tx_drain: ACK/SACK frames from the QP's route template,
          // ICRCs deferred to the burst's finish().
          rx.poll(now);
          rte_mbuf* out[64];
          uint16_t no = 0;
          const bool tracing = traced && tracer.active();
          while (!rx.tx().empty() && no < 64) {
            const TxDesc& d = rx.tx().front();
            if (const rnic::port::EgressRoute* r = fresh_route(qp, d.peer, snap)) {
              const uint16_t sport = r->sport(d.udp_sport);
              if (rte_mbuf* m = encap.build(d, r->tmpl, sport, true)) out[no++] = m;
              if (tracing && qp.trace.tx) [[unlikely]]
                rnic::port::trace_tx(tracer, d, *r, sport, encap.last_ip_id(), [&clock] { return clock.now_ns(); });
            }
            rx.tx().pop();
          }
          encap.finish();
          const uint16_t s = rte_eth_tx_burst(0, queue, out, no);
          ph.acks += s;
          if (s < no) rte_pktmbuf_free_bulk(out + s, no - s);
        }
      }
      ph.secs = static_cast<double>(clock.now_ns() - t0) / 1e9;
      ph.cpu_ns = cpu_ns() - c0;
      ph.accepted = k.rx_accepted;
      return ph;
    };
    if (control) res.floor = run(false);
    res.pipeline = run(true);
    // The bench's own overhead in the pipeline's figure: the RESET -> RTS of
    // the receiving QP before each pass over the frames.
    {
      constexpr int kResets = 1000;
      const double c0 = cpu_ns();
      for (int i = 0; i < kResets; ++i) connect(rx, rqpn, sqpn, 0xC0A80001, true, mtu);
      res.reset_ns = (cpu_ns() - c0) / kResets;
    }
    for (const auto& stage_drops : k.drops)
      for (uint64_t d : stage_drops) res.dropped += d;
    res.trace_records = tracer.written();
  };
  if (!bench::run_on_lcores(lcores, run_lcore)) {
    std::fprintf(stderr, "rx_pipeline_bench: cannot run on %u lcores\n", lcores);
    return 2;
  }
  // The sum over the lcores' common interval: their packets over the
  // longest lcore's wall time (they start together at each start line).
  Phase floor_sum, sum;
  uint64_t dropped = 0, trace_records = 0;
  bool all_accepted = true;
  double reset_ns = 0;
  std::string lcore_mpps, lcore_floor_mpps;
  auto add = [](Phase& to, const Phase& p) {
    to.pkts += p.pkts;
    to.accepted += p.accepted;
    to.acks += p.acks;
    to.cpu_ns += p.cpu_ns;
    to.secs = std::max(to.secs, p.secs);
  };
  auto append = [](std::string& list, double v) {
    char one[32];
    std::snprintf(one, sizeof one, "%s%.4f", list.empty() ? "" : ", ", v);
    list += one;
  };
  for (const LcoreResult& r : results) {
    add(floor_sum, r.floor);
    add(sum, r.pipeline);
    dropped += r.dropped;
    trace_records += r.trace_records;
    reset_ns += r.reset_ns / lcores;
    all_accepted &= r.pipeline.accepted > 0;  // every lcore's frames got through its pipeline
    append(lcore_mpps, r.pipeline.mpps());
    append(lcore_floor_mpps, r.floor.mpps());
  }
  std::printf("{\"mpps\": %.4f, \"floor_mpps\": %.4f, \"accepted\": %lu, \"acks_sent\": %lu, \"payload\": %u, "
              "\"frame_bytes\": %u, \"frames_per_pass\": %u, \"ns_per_packet_cpu\": %.1f, "
              "\"floor_ns_per_packet_cpu\": %.1f, \"qp_reset_ns\": %.0f, \"qp_reset_ns_per_packet\": %.2f, "
              "\"dropped\": %lu, \"icrc\": \"%s\", \"trace\": \"%s\", \"trace_records\": %lu, "
              "\"path\": \"%s\", \"cc\": \"%s\", \"paths\": %u, \"lcores\": %u, \"lcore_mpps\": [%s], "
              "\"lcore_floor_mpps\": [%s], \"mtu\": %u, \"gbn\": %s, \"fused\": %s}\n",
              sum.mpps(), floor_sum.mpps(), static_cast<unsigned long>(sum.accepted),
              static_cast<unsigned long>(sum.acks), payload, results[0].frame_bytes, n_frames, sum.cpu_per_pkt(),
              floor_sum.cpu_per_pkt(), reset_ns, reset_ns / n_frames, static_cast<unsigned long>(dropped),
              common::crc32_backend(), trace_mode.c_str(), static_cast<unsigned long>(trace_records),
              path_policy.c_str(), cc_policy.c_str(), n_paths, lcores, lcore_mpps.c_str(), lcore_floor_mpps.c_str(),
              mtu, gbn ? "true" : "false", fused ? "true" : "false");
  common::dpdk::port_close(0);
  common::dpdk::eal_cleanup();
  std::error_code ec;
  std::filesystem::remove_all("/var/run/dpdk/" + prefix, ec);
  return all_accepted && dropped == 0 ? 0 : 1;
}
