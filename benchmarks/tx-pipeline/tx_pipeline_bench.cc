// tx-pipeline: the tandem-rnic transmit path on one lcore, in process:
// WRITE work request -> core segments it (IRN placement header, PSN, path)
// -> egress route (the level-2 table entry, resolved once per QP and table
// version, as the worker does) -> path set -> TxEncap (Ethernet/IPv4/UDP/
// BTH/RETH/XETH, payload, chained ICRC) -> rte_eth_tx_burst on net_null. The peer's ACKs are synthesised every 32 packets per QP (as
// parsed RocePackets) so the window keeps moving; completions are reaped.
// Prints one JSON line: packets, seconds, mpps, CPU ns per packet, frame bytes.
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <time.h>
#include <unistd.h>

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
#include "common/wire/entropy.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/transport.h"
#include "rnic/dpdk/egress_route.h"
#include "rnic/dpdk/tx_encap.h"
#include "rnic/table/level2_table.h"

using namespace tandem;
using namespace tandem::rnic;

int main(int argc, char** argv) {
  double seconds = 3;
  uint32_t payload = 64, n_qps = 4, txq = 1024, cq_size = 1 << 16, depth = 256;
  bool copy = false, gbn = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--payload" && i + 1 < argc) payload = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--qps" && i + 1 < argc) n_qps = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--txq" && i + 1 < argc) txq = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--cq" && i + 1 < argc) cq_size = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--outstanding" && i + 1 < argc) depth = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--tx-copy") copy = true;
    else if (a == "--gbn") gbn = true;
    else {
      std::fprintf(stderr, "usage: tx_pipeline_bench [--seconds S] [--payload B] [--qps N] [--tx-copy] [--gbn]\n"
                   "         [--txq N (core TX queue, 1024)] [--cq N (CQ entries, 65536)]\n"
                   "         [--outstanding N (WRs posted per QP, 256)]\n");
      return 2;
    }
  }
  const std::string prefix = "tandem-txbench-" + std::to_string(getpid());
  common::dpdk::eal_init("tx_pipeline_bench", {"--no-huge", "--no-pci", "-l", "0", "-m", "256",
                                               "--file-prefix=" + prefix, "--log-level=error", "--vdev=net_null0"});
  rte_mempool* pool = rte_pktmbuf_pool_create("tx_hdr", 8191, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
  rte_mempool* ext = rte_pktmbuf_pool_create("tx_ext", 8191, 256, 0, 0, 0);
  common::dpdk::PortSetup ps;
  ps.link_wait_ms = 0;
  common::dpdk::port_setup(0, pool, ps);

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

  Transport core(TransportConfig{64, 0x100, 8, 4, txq});
  std::vector<uint8_t> mem(1 << 20, 0x5A);
  const MemoryRegion mr = core.reg_mr(mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
  const uint32_t cq = core.create_cq(cq_size);
  std::vector<uint32_t> qpns;
  for (uint32_t i = 0; i < n_qps; ++i) {
    QpInitAttr init;
    init.send_cq = cq;
    init.recv_cq = cq;
    init.sq_depth = 512;
    init.mode = gbn ? Reliability::kGoBackN : Reliability::kIrn;
    const uint32_t q = core.create_qp(init);
    QpAttr a;
    a.state = QpState::kInit;
    core.modify_qp(q, a, IBV_QP_STATE);
    a.state = QpState::kRtr;
    a.path_mtu = 1024;
    a.dest_qp_num = 0x10000 + i;
    a.peer = 0xC0A80002;
    a.path_seed = static_cast<uint16_t>(i * 7919);
    core.modify_qp(q, a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_AV);
    a.state = QpState::kRts;
    a.timeout_ns = 1'000'000'000;  // no retransmission: ACKs are synthesised in time
    core.modify_qp(q, a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT);
    qpns.push_back(q);
  }
  std::vector<uint32_t> outstanding(n_qps, 0), since_ack(n_qps, 0), last_psn(n_qps, 0);

  auto encap = std::make_unique<rnic::dpdk::TxEncap>(pool, ext, copy);
  common::dpdk::TscClock clock;
  const common::MacAddr src_mac = {2, 0, 0, 0, 0, 1};
  const std::vector<std::vector<uint16_t>> no_path_sets;
  std::vector<rnic::dpdk::EgressRoute> routes(n_qps);
  rte_mbuf* burst[32];
  uint16_t nb = 0;
  uint64_t sent = 0, not_sent = 0;
  uint32_t frame_bytes = 0;  // of the first frame (all are alike)
  Completion wc[64];
  SendWr wr;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.remote_addr = 0x7f0000000000;
  wr.rkey = 0x1234;
  wr.num_sge = 1;
  wr.sg_list[0] = Sge{reinterpret_cast<uint64_t>(mem.data()), payload, mr.lkey};
  // CPU time of this thread as well as wall time: on shared cores the
  // wall-clock rate also counts time the scheduler gave to others.
  auto cpu_ns = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
  };
  const uint64_t cpu0 = cpu_ns();
  const uint64_t t0 = clock.now_ns(), end = t0 + static_cast<uint64_t>(seconds * 1e9);
  uint64_t now = t0;
  for (uint64_t iter = 0; now < end; ++iter) {
    now = clock.now_ns();
    // The application's side: one WR reused (as a verbs program reuses its
    // ibv_send_wr), only the id and buffer change.
    wr.wr_id = iter;
    wr.sg_list[0].addr = reinterpret_cast<uint64_t>(mem.data()) + (iter % 1024) * 64;
    for (uint32_t i = 0; i < n_qps; ++i)
      while (outstanding[i] < depth) {
        if (core.post_send(qpns[i], wr) != 0) break;
        ++outstanding[i];
      }
    // As the worker's loop: poll and drain again while the core stopped
    // for a full TX queue (--txq), at most 8 rounds.
    for (int round = 0; round < 8; ++round) {
      core.poll(now);
      const Level2Table::Snapshot snap = table.begin_read();
      TxQueue& tx = core.tx();
      while (!tx.empty()) {
        const TxDesc& d = tx.front();
        const uint32_t qi = d.local_qpn - 0x100;
        rnic::dpdk::EgressRoute& r = routes[qi];
        const Level2Entry* e = nullptr;
        if (r.fresh(snap.version, d.peer) ||
            ((e = table.lookup(snap, common::egress_key(1, d.peer))) != nullptr &&
             (r.resolve(e->egress, src_mac, no_path_sets, snap.version, d.peer), true)))
          if (rte_mbuf* m = encap->build(d, r.tmpl_for(d.bth.dqpn), r.sport(d.udp_sport), true)) {
            burst[nb++] = m;
            if (frame_bytes == 0) frame_bytes = rte_pktmbuf_pkt_len(m);
          }
        last_psn[qi] = d.bth.psn;
        ++since_ack[qi];
        tx.pop();
        if (nb == 32) {
          encap->finish();
          const uint16_t s = rte_eth_tx_burst(0, 0, burst, nb);
          sent += s;
          if (s < nb) {
            not_sent += nb - s;
            rte_pktmbuf_free_bulk(burst + s, nb - s);
          }
          nb = 0;
        }
      }
      if (!core.pending()) break;
    }
    // The peer's cumulative ACKs.
    for (uint32_t i = 0; i < n_qps; ++i) {
      if (since_ack[i] < 32) continue;
      common::RocePacket ack;
      ack.ip.src = 0x0A000002;
      ack.ip.dst = 0x0A000001;
      ack.bth.opcode = IBV_OPCODE_RC_ACKNOWLEDGE;
      ack.bth.dqpn = qpns[i];
      ack.bth.psn = last_psn[i];
      ack.aeth.syndrome = 0x1F;
      core.on_packet(ack, nullptr, 0, now);
      since_ack[i] = 0;
    }
    uint32_t n;
    while ((n = core.poll_cq(cq, wc, 64)) > 0)
      for (uint32_t k = 0; k < n; ++k) --outstanding[wc[k].qp_num - 0x100];
  }
  if (nb) {
    encap->finish();
    const uint16_t s = rte_eth_tx_burst(0, 0, burst, nb);
    sent += s;
    rte_pktmbuf_free_bulk(burst + s, nb - s);
  }
  const double secs = static_cast<double>(clock.now_ns() - t0) / 1e9;
  const double cpu_secs = static_cast<double>(cpu_ns() - cpu0) / 1e9;
  const rnic::dpdk::EncapCounters counters = encap->counters();
  encap->release();
  encap.reset();
  std::printf("{\"packets\": %lu, \"not_sent\": %lu, \"seconds\": %.3f, \"mpps\": %.4f, \"cpu_seconds\": %.3f, "
              "\"mpps_per_cpu_second\": %.4f, \"ns_per_packet_cpu\": %.1f, \"payload\": %u, "
              "\"qps\": %u, \"frame_bytes\": %u, \"zero_copy_segs\": %lu, \"copied_bytes\": %lu}\n",
              static_cast<unsigned long>(sent), static_cast<unsigned long>(not_sent), secs, sent / secs / 1e6,
              cpu_secs, sent / cpu_secs / 1e6, cpu_secs * 1e9 / static_cast<double>(sent ? sent : 1),
              payload, n_qps, frame_bytes, static_cast<unsigned long>(counters.zero_copy_segs),
              static_cast<unsigned long>(counters.copied_bytes));
  common::dpdk::port_close(0);
  common::dpdk::eal_cleanup();
  std::error_code ec;
  std::filesystem::remove_all("/var/run/dpdk/" + prefix, ec);
  return sent > 0 ? 0 : 1;
}
