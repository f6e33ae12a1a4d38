// rx-steer: what receive steering costs a worker with several lcores
// (tandem-rnic --lcores, rnic/dpdk/dpdk_io.h). Lcore 0 plays the lcore whose
// RX queue took the frames: DpdkIo::steer peeks at each frame's BTH
// destination QP and hands the other lcore's frames over its SPSC ring;
// lcore 1 takes them (DpdkIo::take_handed) and gives the mbufs back on a
// return ring (the bench's, not timed). Two passes over the same 64 B
// WRITE frames, same run:
//   baseline  every frame for lcore 0's QPs: the peek alone
//   handoff   every other frame for lcore 1's (as RSS over 2 queues would
//             leave a sprayed QP): the peek, the enqueue, the dequeue
// ours = extra TSC ns per handed frame over both lcores; ratio = ours / baseline.
// The passes alternate for --rounds rounds and the medians are reported:
// on a 2-vCPU VM the two lcores are SMT siblings shared with whatever else
// runs, and one pass moves by 2x.
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/dpdk/eal.h"
#include "common/wire/roce_packet.h"
#include "rnic/dpdk/dpdk_io.h"
#include "rnic/dpdk/steer_rings.h"

using namespace tandem;

namespace {

constexpr uint16_t kBurst = 32;
constexpr uint32_t kFrames = 2048;

struct Pass {
  rnic::dpdk::SteerRings* rings = nullptr;
  rte_ring* back = nullptr;  // lcore 1 -> 0: mbufs to reuse
  double seconds = 1;
  std::atomic<bool> stop{false};
  uint64_t cyc0 = 0, frames0 = 0;   // lcore 0: steer() calls
  uint64_t cyc1 = 0, frames1 = 0;   // lcore 1: take_handed() calls that got frames
};

int taker(void* arg) {
  auto* p = static_cast<Pass*>(arg);
  rnic::dpdk::DpdkIo io(0);
  io.steer(p->rings, 1);
  rte_mbuf* got[kBurst];
  while (!p->stop.load(std::memory_order_relaxed)) {
    const uint64_t t0 = rte_rdtsc();
    const uint16_t n = io.take_handed(got, kBurst);
    if (n == 0) continue;
    p->cyc1 += rte_rdtsc() - t0;
    p->frames1 += n;
    unsigned done = 0;
    while (done < n) done += rte_ring_enqueue_burst(p->back, reinterpret_cast<void**>(got + done), n - done, nullptr);
  }
  return 0;
}

// Runs one pass on this lcore (0) with lcore 1 taking: frames are reused from
// `stack` (and from what lcore 1 gives back) until `seconds` pass.
void run_pass(Pass& p, std::vector<rte_mbuf*> stack) {
  rnic::dpdk::DpdkIo io(0);
  io.steer(p.rings, 0);
  const unsigned worker = rte_get_next_lcore(-1, 1, 0);
  rte_eal_remote_launch(taker, &p, worker);
  const uint64_t end = rte_rdtsc() + static_cast<uint64_t>(p.seconds * rte_get_tsc_hz());
  rte_mbuf* in[kBurst];
  rte_mbuf* mine[kBurst];
  rte_mbuf* back[kBurst * 4];
  while (rte_rdtsc() < end) {
    const unsigned b = rte_ring_dequeue_burst(p.back, reinterpret_cast<void**>(back), kBurst * 4, nullptr);
    stack.insert(stack.end(), back, back + b);
    if (stack.size() < kBurst) continue;
    std::memcpy(in, stack.data() + stack.size() - kBurst, sizeof in);
    stack.resize(stack.size() - kBurst);
    const uint64_t t0 = rte_rdtsc();
    const uint16_t kept = io.steer(in, kBurst, mine, 0);
    p.cyc0 += rte_rdtsc() - t0;
    p.frames0 += kBurst;
    stack.insert(stack.end(), mine, mine + kept);  // "processed": back to the pool of frames
  }
  p.stop = true;
  rte_eal_wait_lcore(worker);
  // What is still in flight belongs to this pass's frames: the next pass starts empty.
  void* drop[kBurst];
  while (rte_ring_dequeue_burst(p.rings->ring(0, 1), drop, kBurst, nullptr) > 0) {
  }
  while (rte_ring_dequeue_burst(p.back, drop, kBurst, nullptr) > 0) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 0.5;
  int rounds = 7;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--json") json = true;
    else {
      std::fprintf(stderr, "usage: rx_steer_bench [--seconds S (per pass, 0.5)] [--rounds N (7)] [--json]\n");
      return 2;
    }
  }
  const std::string prefix = "tandem-bench-steer-" + std::to_string(getpid());
  common::dpdk::eal_init("rx_steer_bench", {"--no-huge", "--no-pci", "-l", "0,1", "-m", "256",
                                            "--file-prefix=" + prefix, "--log-level=error"});
  if (rte_lcore_count() < 2) {
    std::fprintf(stderr, "rx_steer_bench: needs 2 lcores\n");
    return 2;
  }
  rte_mempool* pool = rte_pktmbuf_pool_create("steer", kFrames * 2 + 1023, 256, 0, 2048, rte_socket_id());
  rnic::dpdk::SteerRings rings("bench", 2, 1);
  rte_ring* back = rte_ring_create("steer_back", 8192, rte_socket_id(), RING_F_SP_ENQ | RING_F_SC_DEQ);
  if (pool == nullptr || back == nullptr) {
    std::fprintf(stderr, "rx_steer_bench: no memory for the pool or ring\n");
    return 1;
  }
  const rnic::port::QpShards shards(2);
  // Frames: 64 B RDMA WRITE ONLY; handoff pass: odd ones for lcore 1's QP.
  auto make = [&](bool half) {
    std::vector<rte_mbuf*> v(kFrames);
    if (rte_pktmbuf_alloc_bulk(pool, v.data(), kFrames) != 0) std::abort();
    std::vector<uint8_t> payload(64, 0x5A);
    for (uint32_t i = 0; i < kFrames; ++i) {
      common::RocePacket pk;
      pk.ip.src = 0x0a000001;
      pk.ip.dst = 0x0a000002;
      pk.udp.sport = static_cast<uint16_t>(0xC000 + (i & 15));
      pk.bth.opcode = IBV_OPCODE_RC_RDMA_WRITE_ONLY;
      pk.bth.dqpn = (1u << 16) | (shards.slot_base(half && (i & 1) ? 1 : 0) + (i & 7));
      pk.reth = {0x1000, 5, 64};
      uint8_t* d = rte_pktmbuf_mtod(v[i], uint8_t*);
      const std::size_t n = common::build_roce(pk, payload, d, 2048 - RTE_PKTMBUF_HEADROOM);
      v[i]->data_len = static_cast<uint16_t>(n);
      v[i]->pkt_len = static_cast<uint32_t>(n);
    }
    return v;
  };
  std::vector<rte_mbuf*> fb = make(false), fh = make(true);
  const double ns_per_cyc = 1e9 / static_cast<double>(rte_get_tsc_hz());
  std::vector<double> v_base, v_hand0, v_take, v_extra, v_ours;
  uint64_t handed_total = 0;
  for (int r = 0; r < std::max(rounds, 1); ++r) {
    Pass base, hand;
    base.rings = hand.rings = &rings;
    base.back = hand.back = back;
    base.seconds = hand.seconds = seconds;
    run_pass(base, fb);
    run_pass(hand, fh);
    const double b = static_cast<double>(base.cyc0) * ns_per_cyc / static_cast<double>(base.frames0);
    const double h0 = static_cast<double>(hand.cyc0) * ns_per_cyc / static_cast<double>(hand.frames0);
    const double handed = static_cast<double>(hand.frames1);
    const double take = static_cast<double>(hand.cyc1) * ns_per_cyc / handed;
    // Lcore 0's extra over the baseline, spread over the frames it handed, plus lcore 1's take.
    const double extra = (h0 - b) * static_cast<double>(hand.frames0) / handed;
    v_base.push_back(b);
    v_hand0.push_back(h0);
    v_take.push_back(take);
    v_extra.push_back(extra);
    v_ours.push_back(extra + take);
    handed_total += hand.frames1;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double base_ns = median(v_base), hand0_ns = median(v_hand0), take_ns = median(v_take);
  const double extra0 = median(v_extra), ours = median(v_ours);
  nlohmann::json j = {{"bench", "rx-steer"},
                      {"unit", "ns/frame"},
                      {"ours", ours},
                      {"baseline", base_ns},
                      {"baseline_name", "peek only: every frame for the receiving lcore's QPs"},
                      {"ratio", ours / base_ns},
                      {"handed_frames", handed_total},
                      {"rounds", rounds},
                      {"ours_min", *std::min_element(v_ours.begin(), v_ours.end())},
                      {"ours_max", *std::max_element(v_ours.begin(), v_ours.end())},
                      {"lcore0_ns_per_frame_handoff_pass", hand0_ns},
                      {"lcore1_take_ns_per_frame", take_ns},
                      {"lcore0_extra_ns_per_handed_frame", extra0},
                      {"seconds_per_pass", seconds}};
  if (json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("rx-steer (2 lcores, 64 B WRITE frames, TSC ns, medians of %d rounds):\n", rounds);
    std::printf("  baseline: peek, frame kept             %7.2f ns/frame\n", base_ns);
    std::printf("  handoff pass, receiving lcore          %7.2f ns/frame (half of them handed over)\n", hand0_ns);
    std::printf("  owner lcore's dequeue                  %7.2f ns/handed frame\n", take_ns);
    std::printf("  ours: cost of one handed frame         %7.2f ns (%.2fx the peek; rounds %.1f..%.1f)\n", ours,
                ours / base_ns, *std::min_element(v_ours.begin(), v_ours.end()),
                *std::max_element(v_ours.begin(), v_ours.end()));
  }
  rte_ring_free(back);
  return 0;
}
