// The port logic (port_logic.h) over an I/O layer (port_io.h): one loop
// iteration's bursts. The worker runs it on DPDK (rnic/dpdk/dpdk_io.h), the
// unit tests on a fake; the loop around it (idle, signals, the agent's
// channel, snapshots) is the caller's.
//
// Per iteration (run_once):
//   host_.apply_control -> host events onto the core's verbs -> WQEs to the core
//   rx_burst(32) per port -> RxStage passes (parse, ICRCs, tenant check and
//     remote-address translation, core.on_packets)
//   core.poll(now) -> TxQueue -> egress route -> io.build -> tx_burst (what
//     the port refuses stays at the front of the burst and is retried first)
//   core.poll_cq -> host completions
#pragma once

#include <cstring>

#include "rnic/port/port_io.h"
#include "rnic/port/port_logic.h"
#include "rnic/port/rx_stage.h"
#include "rnic/port/tx_trace.h"

namespace tandem::rnic::port {

template <PortIo Io>
class PortWorker final : public PortLogic {
 public:
  using Buf = typename Io::Buf;

  PortWorker(const PortConfig& c, Level2Table& table, host::FastPath& host, AgentLink* agent, Io& io)
      : PortLogic(c, table, host, agent), io_(io) {}

  // One iteration at `now` (the I/O layer's clock); returns the work done
  // (0: the loop may idle, unless has_backlog()).
  uint32_t run_once(uint64_t now) noexcept {
    now_ = now;
    ++k_.loop_iterations;
    tracer_->poll(now);  // a new or expired trace rule: one load when nothing changed
    if (tracer_->generation() != trace_generation_) [[unlikely]] compile_trace();
    // Objects the control thread finished (QPs, CQs, MRs mapped for the
    // device, departures): one load when there are none, never a syscall.
    uint32_t work = host_.apply_control(now);
    work += host_events(now);
    work += completions();
    // WQEs before the RX burst, as an RNIC reads the doorbell when a packet
    // needs a WQE: a RECV posted before its SEND arrived is found (UD has no RNR retry).
    work += pump_work();
    work += rx_burst(now);
    if (gsi_ != nullptr) work += gsi_drain();
    for (int i = 0; i < 8; ++i) {
      core_.poll(now);
      work += tx_drain();
      if (!core_.pending()) break;
    }
    work += completions();
    return work;
  }

  // The worker stops: every live QP flushed, what the port never took freed.
  void shutdown(uint64_t now) {
    now_ = now;
    flush_all(now);
    tx_flush();
    tx_discard();
  }

  // Frames built and not yet taken by the port.
  uint16_t tx_held() const noexcept { return tx_n_; }

 private:
  uint32_t rx_burst(uint64_t now) noexcept {
    uint32_t total = 0;
    const uint16_t ports = io_.rx_ports();
    for (uint16_t port = 0; port < ports; ++port) total += rx_port(port, now);
    return total;
  }

  uint32_t rx_port(uint16_t port, uint64_t now) noexcept {
    Buf* pkts[kBurst];
    const uint16_t n = io_.rx_burst(port, pkts, kBurst);
    if (n == 0) return 0;
    const Level2Table::Snapshot snap = snapshot();
    if (tracer_->active()) [[unlikely]] now = io_.now_ns();  // records stamped after the burst arrived
    rx_.run(pkts, n, core_, k_, now,
            [&](common::RocePacket& pkt, uint8_t* data, bool& traced) noexcept {
              return accept(pkt, data, snap, traced);
            },
            *tracer_,
            snap.version);
    io_.free_bulk(pkts, n);  // placement copied what it kept
    return n;
  }

  // Frames the port did not take stay at the front of the burst and are
  // retried first: back-pressure reaches the core (its TX queue fills and it
  // stops), instead of dropping frames the peer would have to recover by timeout.
  bool tx_flush() noexcept {
    if (tx_n_ == 0) return true;
    io_.finish();  // the burst's deferred ICRCs, back to back
    // Lengths first: a PMD may free (and the pool reuse) what it took.
    uint32_t len[kBurst];
    for (uint16_t i = 0; i < tx_n_; ++i) len[i] = Io::len(tx_buf_[i]);
    const uint16_t sent = io_.tx_burst(tx_buf_, tx_n_);
    for (uint16_t i = 0; i < sent; ++i) k_.tx_bytes += len[i];
    k_.tx_packets += sent;
    if (sent < tx_n_) {
      ++k_.tx_backpressure;
      std::memmove(tx_buf_, tx_buf_ + sent, (tx_n_ - sent) * sizeof(Buf*));
    }
    tx_n_ = static_cast<uint16_t>(tx_n_ - sent);
    return tx_n_ == 0;
  }

  void tx_discard() noexcept {
    k_.tx_not_sent += tx_n_;
    if (tx_n_) io_.free_bulk(tx_buf_, tx_n_);
    tx_n_ = 0;
  }

  // The connection manager's MADs (port_gsi.cc): a few per iteration, after
  // the RX burst, into the same TX burst as the core's frames.
  // An empty ring costs two loads of a line only the CM thread writes (no table snapshot).
  uint32_t gsi_drain() noexcept {
    cm::GsiOut& o = gsi_out_;
    if (tx_n_ == kBurst || !gsi_->out.pop(&o)) [[likely]]
      return 0;
    uint32_t n = 0;
    const Level2Table::Snapshot snap = snapshot();
    do {
      ++n;
      TxDesc d;
      const EncapTemplate* t = nullptr;
      if (!gsi_frame(o, snap, d, &t)) continue;
      Buf* m = io_.build(d, *t, gsi_route_.sport(d.udp_sport));
      if (m == nullptr) {
        gsi_->tx_no_buffer.fetch_add(1, std::memory_order_relaxed);
        k_.drop(Stage::kEgress, common::DropReason::kNoBuffer);
        continue;
      }
      gsi_->tx_mads.fetch_add(1, std::memory_order_relaxed);
      tx_buf_[tx_n_++] = m;
    } while (n < 16 && tx_n_ < kBurst && gsi_->out.pop(&o));
    tx_flush();
    return n;
  }

  uint32_t tx_drain() noexcept {
    TxQueue& tx = core_.tx();
    if (!tx_flush() && tx_n_ == kBurst) return 0;  // the port is full: leave the core's queue alone
    if (tx.empty()) return 0;
    const Level2Table::Snapshot snap = snapshot();
    // A rule that flags none of this port's QPs costs no test per packet; a
    // route resolved here may flag its QP, so the test is re-read after one.
    bool tracing = trace_tx_flags_ && tracer_->active();
    uint32_t n = 0;
    while (!tx.empty() && tx_n_ < kBurst) {
      const TxDesc& d = tx.front();
      ++n;
      QpCtx* q = by_core(d.local_qpn);
      if (q == nullptr || !q->routed) {
        k_.drop(Stage::kEgress, common::DropReason::kUnknownQpn);
        tx.pop();
        continue;
      }
      EgressRoute* r = &q->route;
      if (!r->fresh(snap.version, d.peer)) [[unlikely]] {
        r = fresh_route(*q, d.peer, snap);
        tracing = trace_tx_flags_ && tracer_->active();
      }
      if (r == nullptr) {
        k_.drop(Stage::kEgress, common::DropReason::kTableMiss);
        tx.pop();
        continue;
      }
      const uint16_t sport = r->sport(d.udp_sport);
      Buf* m = io_.build(d, r->tmpl_for(d.bth.dqpn), sport);
      if (tracing && q->trace.tx) [[unlikely]] {  // the QP's flag (trace_flags.h), then the rule
        uint16_t ip_id = 0;
        if constexpr (requires { io_.last_ip_id(); }) ip_id = io_.last_ip_id();
        trace_tx(*tracer_, d, *r, sport, ip_id, [this] { return io_.now_ns(); });
      }
      if (d.retransmit) ++k_.tx_retransmits;
      tx.pop();
      if (m == nullptr) {
        k_.drop(Stage::kEgress, common::DropReason::kNoBuffer);
        continue;
      }
      tx_buf_[tx_n_++] = m;
      if (tx_n_ == kBurst && !tx_flush() && tx_n_ == kBurst) break;
    }
    tx_flush();
    return n;
  }

  Io& io_;
  Buf* tx_buf_[kBurst];
  uint16_t tx_n_ = 0;
  RxStage<Io> rx_;  // the receive passes over a burst (rx_stage.h)
  cm::GsiOut gsi_out_;  // the CM's MAD being sent (not built per iteration)
};

}  // namespace tandem::rnic::port
