#include "common/fabric/dpdk/fabric.h"

#include <arpa/inet.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>

#include <atomic>
#include <bit>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/dpdk/eal.h"
#include "common/dpdk/process_trace.h"
#include "common/dpdk/idle_loop.h"
#include "common/dpdk/port.h"
#include "common/dpdk/stop_signal.h"
#include "common/dpdk/telemetry.h"
#include "common/dpdk/unmap_guard.h"
#include "common/dpdk/tsc_clock.h"
#include "common/fabric/ecmp.h"
#include "common/fabric/ecn.h"
#include "common/fabric/path_model.h"
#include "common/fabric/path_spec.h"
#include "common/fabric/route_table.h"
#include "common/log/log.h"

namespace tandem::common::fabric {

namespace {

constexpr uint16_t kBurst = 32;
constexpr int kPrefetch = 3;

// Why a packet never reached a path (path drops live in PathCounters).
enum class PortDrop : uint8_t { kNotIpv4, kNoRoute, kTxFull, kCount };
constexpr const char* kPortDropNames[] = {"not_ipv4", "no_route", "tx_full"};

struct alignas(64) PortState {
  uint16_t id = 0;
  std::string name;
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
  uint64_t drops[static_cast<int>(PortDrop::kCount)] = {};
  rte_mbuf* tx_buf[kBurst] = {};
  uint16_t tx_n = 0;
  uint32_t empty_polls = 0;  // rx bursts in a row that brought nothing
  uint16_t next_rxq = 0;     // --rx-queues > 1: the queue polled first next round
};

// A port that has been quiet for kQuietPolls bursts is polled only every
// kQuietStride-th iteration while other ports keep the loop busy (an idle
// loop polls every port each time round: it sleeps between rounds, and a
// quiet port must not add that sleep x kQuietStride to a packet's latency).
// This saves cycles; it also was the first mitigation of DPDK 22.11 memif's
// unmap race, which PortSection (unmap_guard.h) now closes.
constexpr uint32_t kQuietPolls = 256;
constexpr uint32_t kQuietStride = 32;

struct Held {
  rte_mbuf* m;
  uint64_t at;
  uint16_t port;
  bool traced = false;  // a trace rule matched it on the way in: its delivery is recorded too
};

// A RoCEv2 frame's trace identity (common/trace): false for anything else.
bool roce_identity(const uint8_t* eth, uint32_t dlen, trace::Record& r, uint16_t& pkey) noexcept {
  if (dlen < 34 || eth[12] != 0x08 || eth[13] != 0x00) return false;
  const uint8_t* ip = eth + 14;
  const uint32_t ihl = (ip[0] & 0x0F) * 4u;
  if (ip[9] != 17 || dlen < 14 + ihl + 8 + 12) return false;
  const uint8_t* udp = ip + ihl;
  if ((udp[2] << 8 | udp[3]) != 4791) return false;
  const uint8_t* bth = udp + 8;
  r.src_ip = uint32_t{ip[12]} << 24 | uint32_t{ip[13]} << 16 | uint32_t{ip[14]} << 8 | ip[15];
  r.dst_ip = uint32_t{ip[16]} << 24 | uint32_t{ip[17]} << 16 | uint32_t{ip[18]} << 8 | ip[19];
  r.sport = static_cast<uint16_t>(udp[0] << 8 | udp[1]);
  r.opcode = bth[0];
  r.dqpn = uint32_t{bth[5]} << 16 | uint32_t{bth[6]} << 8 | bth[7];
  r.psn = uint32_t{bth[9]} << 16 | uint32_t{bth[10]} << 8 | bth[11];
  r.ip_id = static_cast<uint16_t>(ip[4] << 8 | ip[5]);
  pkey = static_cast<uint16_t>(bth[2] << 8 | bth[3]);
  return true;
}

// A path: the sans-I/O model plus a FIFO of the mbufs it holds. The model
// keeps deliveries in time order per path, so a FIFO is the time queue.
struct alignas(64) PathState {
  PathModel model;
  std::vector<Held> fifo;
  uint32_t mask = 0, head = 0, tail = 0;
  uint64_t ce_not_ect = 0;  // marking asked for, but the packet was not ECN-capable
  uint64_t flushed_on_fail = 0;  // accepted, then lost when the path failed (also in drop_path_down)
  // Control requests from the telemetry thread, applied by the fast path.
  std::atomic<int> want_up{-1};
  std::atomic<uint64_t> want_loss_bits{0};
  std::atomic<bool> want_loss{false};

  uint32_t held() const noexcept { return tail - head; }
};

struct Fabric {
  const FabricConfig& cfg;
  RouteTable routes;
  std::vector<PortState> ports;
  std::unique_ptr<PathState[]> paths;
  uint32_t n_paths = 0;
  Rng rng;
  dpdk::TscClock clock;
  std::atomic<uint32_t> ctl_seq{0};
  uint32_t ctl_seen = 0;
  uint64_t held_at_exit = 0;
  std::shared_ptr<dpdk::ProcessTrace> trace;  // trace units: the lcore's tracer and its ring

  explicit Fabric(const FabricConfig& c) : cfg(c), routes(c.routes), rng(c.rng_seed) {}

  void flush_port(PortState& p) noexcept {
    if (p.tx_n == 0) return;
    const uint16_t sent = rte_eth_tx_burst(p.id, 0, p.tx_buf, p.tx_n);
    for (uint16_t i = 0; i < sent; ++i) {
      p.tx_bytes += rte_pktmbuf_pkt_len(p.tx_buf[i]);
    }
    p.tx_packets += sent;
    if (sent < p.tx_n) {
      p.drops[static_cast<int>(PortDrop::kTxFull)] += p.tx_n - sent;
      rte_pktmbuf_free_bulk(&p.tx_buf[sent], p.tx_n - sent);
    }
    p.tx_n = 0;
  }

  void flush_path(PathState& ps, PathDrop why) noexcept {
    const uint32_t n = ps.held();
    const uint64_t now = trace->tracer.active() ? clock.now_ns() : 0;
    while (ps.head != ps.tail) {
      const Held& h = ps.fifo[ps.head++ & ps.mask];
      if (h.traced) [[unlikely]] trace_held(h, trace::Stage::kFabricDrop, why, static_cast<uint32_t>(&ps - paths.get()), now);
      rte_pktmbuf_free(h.m);
    }
    ps.model.count_drops(why, n);
  }

  // Records a packet of a traced flow at a stage; false if the rule does not match it.
  bool trace_packet(const uint8_t* eth, uint32_t dlen, trace::Stage stage, PathDrop why, uint32_t path,
                    uint64_t now) noexcept {
    trace::Record r;
    uint16_t pkey = 0;
    if (!roce_identity(eth, dlen, r, pkey) || !trace->tracer.matches(r.src_ip, r.dst_ip, r.dqpn, pkey)) return false;
    r.ts_ns = now;
    r.stage = stage;
    r.verdict = static_cast<uint8_t>(why);
    r.aux = path;
    trace->tracer.record(r);
    return true;
  }
  void trace_held(const Held& h, trace::Stage stage, PathDrop why, uint32_t path, uint64_t now) noexcept {
    if (trace->tracer.active())
      trace_packet(rte_pktmbuf_mtod(h.m, const uint8_t*), rte_pktmbuf_data_len(h.m), stage, why, path, now);
  }

  void apply_control() noexcept {
    const uint32_t seq = ctl_seq.load(std::memory_order_acquire);
    if (seq == ctl_seen) return;
    ctl_seen = seq;
    for (uint32_t k = 0; k < n_paths; ++k) {
      PathState& ps = paths[k];
      const int up = ps.want_up.exchange(-1, std::memory_order_relaxed);
      if (up == 0 && ps.model.up()) {
        ps.model.set_up(false);
        ps.flushed_on_fail += ps.held();
        flush_path(ps, PathDrop::kDown);  // a failed link loses what it carried
      } else if (up == 1) {
        ps.model.set_up(true);
      }
      if (ps.want_loss.exchange(false, std::memory_order_relaxed))
        ps.model.set_loss(std::bit_cast<double>(ps.want_loss_bits.load(std::memory_order_relaxed)));
    }
  }

  // Classifies one received packet and hands it to a path (or drops it).
  void ingress(PortState& in, rte_mbuf* m, uint64_t now) noexcept {
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    const uint32_t dlen = rte_pktmbuf_data_len(m);
    uint8_t* eth = rte_pktmbuf_mtod(m, uint8_t*);
    in.rx_packets++;
    in.rx_bytes += len;
    if (dlen < 34 || eth[12] != 0x08 || eth[13] != 0x00 || (eth[14] >> 4) != 4) {
      in.drops[static_cast<int>(PortDrop::kNotIpv4)]++;
      rte_pktmbuf_free(m);
      return;
    }
    uint8_t* ip = eth + 14;
    const uint32_t ihl = (ip[0] & 0x0F) * 4u;
    FiveTuple t;
    t.src_ip = uint32_t{ip[12]} << 24 | uint32_t{ip[13]} << 16 | uint32_t{ip[14]} << 8 | ip[15];
    t.dst_ip = uint32_t{ip[16]} << 24 | uint32_t{ip[17]} << 16 | uint32_t{ip[18]} << 8 | ip[19];
    t.proto = ip[9];
    const bool first_fragment = ((ip[6] & 0x1F) | ip[7]) == 0;
    if ((t.proto == 17 || t.proto == 6) && first_fragment && dlen >= 14 + ihl + 4) {
      const uint8_t* l4 = ip + ihl;
      t.sport = static_cast<uint16_t>(l4[0] << 8 | l4[1]);
      t.dport = static_cast<uint16_t>(l4[2] << 8 | l4[3]);
    }
    const int out = routes.lookup(t.dst_ip);
    if (out == RouteTable::kMiss || static_cast<std::size_t>(out) >= ports.size()) {
      in.drops[static_cast<int>(PortDrop::kNoRoute)]++;
      rte_pktmbuf_free(m);
      return;
    }
    const uint32_t k = ecmp_pick(t, n_paths, cfg.ecmp_seed);
    PathState& ps = paths[k];
    bool traced = false;
    if (trace->tracer.active()) [[unlikely]]
      traced = trace_packet(eth, dlen, trace::Stage::kFabricEnqueue, PathDrop::kNone, k, clock.now_ns());
    if (ps.held() > ps.mask) {
      ps.model.count_drop(PathDrop::kHoldFull);
      if (traced) trace_packet(eth, dlen, trace::Stage::kFabricDrop, PathDrop::kHoldFull, k, clock.now_ns());
      rte_pktmbuf_free(m);
      return;
    }
    const PathVerdict v = ps.model.admit(len, now, rng);
    if (v.drop != PathDrop::kNone) {
      if (traced) trace_packet(eth, dlen, trace::Stage::kFabricDrop, v.drop, k, clock.now_ns());
      rte_pktmbuf_free(m);
      return;
    }
    if (v.mark_ce && mark_ce_ipv4(ip, dlen - 14) == EcnMark::kNotEct) ps.ce_not_ect++;
    ps.fifo[ps.tail++ & ps.mask] = Held{m, v.deliver_at, static_cast<uint16_t>(out), traced};
  }

  // Moves every packet whose time has come to its output port's TX buffer.
  // Returns whether anything was sent or is still held: while packets are
  // in flight the adaptive idle loop must not sleep, or it would stretch
  // the configured delays by its sleep time.
  bool release(uint64_t now) noexcept {
    bool any = false;
    for (uint32_t k = 0; k < n_paths; ++k) {
      PathState& ps = paths[k];
      any |= ps.head != ps.tail;
      while (ps.head != ps.tail) {
        const Held& h = ps.fifo[ps.head & ps.mask];
        if (h.at > now) break;
        if (h.traced) [[unlikely]] trace_held(h, trace::Stage::kFabricDeliver, PathDrop::kNone, k, now);
        PortState& p = ports[h.port];
        p.tx_buf[p.tx_n++] = h.m;
        if (p.tx_n == kBurst) flush_port(p);
        ps.head++;
      }
    }
    for (auto& p : ports) flush_port(p);
    return any;
  }

  void loop() {
    dpdk::IdleLoop idle(cfg.idle);
    rte_mbuf* burst[kBurst];
    const uint64_t end = cfg.duration_s > 0 ? clock.now_ns() + static_cast<uint64_t>(cfg.duration_s * 1e9) : 0;
    uint64_t iteration = 0;
    const uint16_t n_rxq = cfg.port.rx_queues;
    bool busy = false;  // the last iteration moved packets
    dpdk::unmap_guard_init();
    while (!dpdk::stop_requested()) {
      apply_control();
      bool work = false;
      uint64_t now = clock.now_ns();
      trace->tracer.poll(now);
      ++iteration;
      {
        // Every rx and tx burst of the round; a memif peer's regions stay
        // mapped until the section ends (unmap_guard.h). Not the idle sleep.
        dpdk::PortSection in_ports;
        for (auto& p : ports) {
          if (busy && p.empty_polls >= kQuietPolls && iteration % kQuietStride != 0) continue;
          uint16_t n = 0;
          for (uint16_t q = 0; q < n_rxq && n == 0; ++q, p.next_rxq = p.next_rxq + 1 == n_rxq ? 0 : p.next_rxq + 1)
            n = rte_eth_rx_burst(p.id, p.next_rxq, burst, kBurst);
          if (n == 0) {
            if (p.empty_polls < kQuietPolls) ++p.empty_polls;
            continue;
          }
          p.empty_polls = 0;
          work = true;
          for (int i = 0; i < kPrefetch && i < n; ++i) rte_prefetch0(rte_pktmbuf_mtod(burst[i], void*));
          for (uint16_t i = 0; i < n; ++i) {
            if (i + kPrefetch < n) rte_prefetch0(rte_pktmbuf_mtod(burst[i + kPrefetch], void*));
            ingress(p, burst[i], now);
          }
        }
        now = clock.now_ns();
        work |= release(now);
      }
      busy = work;
      idle.after_iteration(work);
      if (end != 0 && now >= end) break;
    }
    for (uint32_t k = 0; k < n_paths; ++k) {
      held_at_exit += paths[k].held();
      while (paths[k].head != paths[k].tail) rte_pktmbuf_free(paths[k].fifo[paths[k].head++ & paths[k].mask].m);
    }
  }

  // ---- counters: telemetry, exit table, JSON ----------------------------
  nlohmann::json counters_json() const {
    nlohmann::json j;
    j["ports"] = nlohmann::json::array();
    for (const auto& p : ports) {
      nlohmann::json pj{{"port", p.id}, {"name", p.name}, {"rx_packets", p.rx_packets},
                        {"rx_bytes", p.rx_bytes}, {"tx_packets", p.tx_packets}, {"tx_bytes", p.tx_bytes}};
      for (int d = 0; d < static_cast<int>(PortDrop::kCount); ++d) pj[std::string("drop_") + kPortDropNames[d]] = p.drops[d];
      j["ports"].push_back(pj);
    }
    j["paths"] = nlohmann::json::array();
    for (uint32_t k = 0; k < n_paths; ++k) {
      const PathState& ps = paths[k];
      const PathCounters& c = ps.model.counters();
      nlohmann::json pj{{"path", k}, {"up", ps.model.up()}, {"spec", format_path_spec(ps.model.config())},
                        {"packets", c.packets}, {"bytes", c.bytes}, {"ecn_marks", c.ecn_marks},
                        {"ce_not_ect", ps.ce_not_ect}, {"flushed_on_fail", ps.flushed_on_fail},
                        {"max_queue_bytes", c.max_queue_bytes},
                        {"held", ps.held()}};
      for (std::size_t d = 1; d < kPathDropCount; ++d)
        pj[std::string("drop_") + std::string(path_drop_name(static_cast<PathDrop>(d)))] = c.drops[d];
      j["paths"].push_back(pj);
    }
    j["held_at_exit"] = held_at_exit;
    const dpdk::UnmapGuardStats g = dpdk::unmap_guard_stats();
    j["unmap_guard"] = {{"active", dpdk::unmap_guard_active()}, {"unmaps", g.unmaps}, {"waited", g.waited},
                        {"wait_ns_max", g.wait_ns_max}, {"timeouts", g.timeouts}};
    return j;
  }

  void print_counters() const {
    std::printf("%-5s %-24s %12s %12s %10s %10s %10s\n", "port", "name", "rx", "tx", "not_ipv4", "no_route",
                "tx_full");
    for (const auto& p : ports)
      std::printf("%-5u %-24s %12lu %12lu %10lu %10lu %10lu\n", p.id, p.name.c_str(), p.rx_packets, p.tx_packets,
                  p.drops[0], p.drops[1], p.drops[2]);
    std::printf("%-5s %-5s %12s %10s %10s %10s %10s %10s %12s\n", "path", "up", "delivered", "down", "loss",
                "queue_full", "hold_full", "ecn_marks", "max_queue_B");
    for (uint32_t k = 0; k < n_paths; ++k) {
      const auto& c = paths[k].model.counters();
      std::printf("%-5u %-5s %12lu %10lu %10lu %10lu %10lu %10lu %12lu\n", k, paths[k].model.up() ? "up" : "down",
                  c.packets, c.drops[1], c.drops[2], c.drops[3], c.drops[4], c.ecn_marks, c.max_queue_bytes);
    }
    std::fflush(stdout);
  }

  void register_telemetry() {
    using dpdk::TelemetryDict;
    dpdk::telemetry_register("/tandem/fabric/ports", "Per-port counters of tandem-fabric",
                             [this](std::string_view, TelemetryDict& out) {
                               for (const auto& p : ports)
                                 out.dict(std::to_string(p.id).c_str(), [&](TelemetryDict& d) {
                                   d.str("name", p.name);
                                   d.u64("rx_packets", p.rx_packets);
                                   d.u64("rx_bytes", p.rx_bytes);
                                   d.u64("tx_packets", p.tx_packets);
                                   d.u64("tx_bytes", p.tx_bytes);
                                   for (int r = 0; r < static_cast<int>(PortDrop::kCount); ++r)
                                     d.u64((std::string("drop_") + kPortDropNames[r]).c_str(), p.drops[r]);
                                 });
                               return 0;
                             });
    dpdk::telemetry_register("/tandem/fabric/paths", "Per-path counters and state of tandem-fabric",
                             [this](std::string_view, TelemetryDict& out) {
                               for (uint32_t k = 0; k < n_paths; ++k) {
                                 const PathState& ps = paths[k];
                                 out.dict(std::to_string(k).c_str(), [&](TelemetryDict& d) {
                                   const PathCounters& c = ps.model.counters();
                                   d.u64("up", ps.model.up());
                                   d.str("spec", format_path_spec(ps.model.config()));
                                   d.u64("packets", c.packets);
                                   d.u64("bytes", c.bytes);
                                   for (std::size_t r = 1; r < kPathDropCount; ++r)
                                     d.u64((std::string("drop_") + std::string(path_drop_name(static_cast<PathDrop>(r)))).c_str(),
                                           c.drops[r]);
                                   d.u64("ecn_marks", c.ecn_marks);
                                   d.u64("ce_not_ect", ps.ce_not_ect);
                                   d.u64("flushed_on_fail", ps.flushed_on_fail);
                                   d.u64("max_queue_bytes", c.max_queue_bytes);
                                   d.u64("held", ps.held());
                                 });
                               }
                               return 0;
                             });
    dpdk::register_trace_telemetry("/tandem/fabric/trace", trace);
    dpdk::telemetry_register(
        "/tandem/fabric/route",
        "The path a packet takes: <src-ip>,<dst-ip>,<udp-sport>[,<udp-dport>=4791]",
        [this](std::string_view params, TelemetryDict& out) {
          std::vector<std::string> f;
          std::string cur;
          for (char ch : params) {
            if (ch == ',') {
              f.push_back(cur);
              cur.clear();
            } else {
              cur += ch;
            }
          }
          f.push_back(cur);
          try {
            if (f.size() < 3 || f.size() > 4) throw std::invalid_argument("want <src-ip>,<dst-ip>,<sport>[,<dport>]");
            FiveTuple t;
            t.src_ip = parse_ipv4(f[0]);
            t.dst_ip = parse_ipv4(f[1]);
            t.sport = static_cast<uint16_t>(std::stoul(f[2]));
            t.dport = static_cast<uint16_t>(f.size() == 4 ? std::stoul(f[3]) : 4791);
            out.u64("path", ecmp_pick(t, n_paths, cfg.ecmp_seed));
            out.u64("paths", n_paths);
          } catch (const std::exception& e) {
            out.str("error", e.what());
          }
          return 0;
        });
    dpdk::telemetry_register(
        "/tandem/fabric/path_set",
        "Fail, heal or re-tune a path. Parameters: <k>,down | <k>,up | <k>,loss=<0..1>",
        [this](std::string_view params, TelemetryDict& out) {
          const auto comma = params.find(',');
          if (comma == std::string_view::npos) {
            out.str("error", "usage: /tandem/fabric/path_set,<k>,down|up|loss=<p>");
            return 0;
          }
          const std::string ks(params.substr(0, comma));
          const std::string_view what = params.substr(comma + 1);
          char* endp = nullptr;
          const unsigned long k = std::strtoul(ks.c_str(), &endp, 10);
          if (ks.empty() || *endp != '\0' || k >= n_paths) {
            out.str("error", "no path '" + ks + "' (have " + std::to_string(n_paths) + ")");
            return 0;
          }
          PathState& ps = paths[k];
          if (what == "down") {
            ps.want_up.store(0, std::memory_order_relaxed);
          } else if (what == "up") {
            ps.want_up.store(1, std::memory_order_relaxed);
          } else {
            try {
              const PathConfig c = parse_path_spec(what, ps.model.config());
              if (what.rfind("loss=", 0) != 0 || what.find(',') != std::string_view::npos)
                throw std::invalid_argument("only down, up or loss=<p> can change at run time");
              ps.want_loss_bits.store(std::bit_cast<uint64_t>(c.loss), std::memory_order_relaxed);
              ps.want_loss.store(true, std::memory_order_relaxed);
            } catch (const std::invalid_argument& e) {
              out.str("error", e.what());
              return 0;
            }
          }
          ctl_seq.fetch_add(1, std::memory_order_release);
          out.u64("path", k);
          out.str("applied", std::string(what));
          return 0;
        });
  }
};

}  // namespace

int run(const FabricConfig& c) {
  if (c.paths.empty()) throw std::invalid_argument("at least one path is needed");
  if (c.hold_per_path == 0 || !std::has_single_bit(c.hold_per_path))
    throw std::invalid_argument("--hold must be a power of two");
  dpdk::eal_init("tandem-fabric", c.eal_args);
  dpdk::install_stop_handlers();
  const uint16_t n_ports = rte_eth_dev_count_avail();
  if (n_ports == 0)
    throw std::runtime_error("no ports: give one --vdev per attached host after '--' "
                             "(e.g. --vdev=net_memif0,role=server,socket=/tmp/h0.sock)");
  for (const auto& [ip, port] : c.routes)
    if (port >= n_ports)
      throw std::invalid_argument("route " + format_ipv4(ip) + " -> port " + std::to_string(port) +
                                  ", but only " + std::to_string(n_ports) + " port(s) exist");
  if (c.routes.empty()) common::log::warn("no routes: every packet will be dropped as no_route");

  auto fabric = std::make_unique<Fabric>(c);
  fabric->n_paths = static_cast<uint32_t>(c.paths.size());
  fabric->paths = std::make_unique<PathState[]>(fabric->n_paths);
  for (uint32_t k = 0; k < fabric->n_paths; ++k) {
    PathState& ps = fabric->paths[k];
    ps.model.configure(c.paths[k]);
    ps.fifo.resize(c.hold_per_path);
    ps.mask = c.hold_per_path - 1;
  }
  const uint32_t n_mbufs = dpdk::mempool_size(n_ports * c.port.rx_queues, c.port, kBurst, fabric->n_paths * c.hold_per_path);
  rte_mempool* pool = dpdk::create_pktmbuf_pool("fabric_pool", n_mbufs);
  uint16_t pid;
  RTE_ETH_FOREACH_DEV(pid) {
    if (pid != fabric->ports.size())
      throw std::runtime_error("port ids are not contiguous (detached port?)");
    PortState p;
    p.id = pid;
    p.name = dpdk::port_name(pid);
    const bool up = dpdk::port_setup(pid, pool, c.port);
    common::log::info("port {} {}: link {}", pid, p.name, up ? "up" : "down (will forward once it comes up)");
    fabric->ports.push_back(std::move(p));
  }
  if (c.pdump) dpdk::pdump_init();
  // Four times a worker's ring: the fabric records every traced packet twice (in and out), both ways.
  fabric->trace = dpdk::open_process_trace("tandem-fabric", fabric->clock, 4 * trace::kDefaultCapacity);
  fabric->register_telemetry();
  if (!dpdk::unmap_guard_active())
    common::log::warn("munmap is not interposed (built without --export-dynamic-symbol=munmap?): a memif peer leaving "
                      "may crash the fabric");
  for (uint32_t k = 0; k < fabric->n_paths; ++k) common::log::info("path {}: {}", k, format_path_spec(c.paths[k]));
  // Last: the line the lab scripts wait for ("tandem-fabric:" on its output).
  common::log::info("{} port(s), {} path(s), {} route(s), {} mbufs, idle={}", n_ports, fabric->n_paths,
                    c.routes.size(), n_mbufs, c.idle.mode == dpdk::IdleMode::kBusy ? "busy" : "adaptive");

  fabric->loop();

  for (auto& p : fabric->ports) dpdk::port_close(p.id);
  fabric->print_counters();
  if (!c.stats_json.empty()) {
    std::ofstream f(c.stats_json);
    f << fabric->counters_json().dump(2) << "\n";
    if (!f) common::log::error("cannot write {}", c.stats_json);
  }
  rte_mempool_free(pool);
  dpdk::eal_cleanup();
  return 0;
}

}  // namespace tandem::common::fabric
