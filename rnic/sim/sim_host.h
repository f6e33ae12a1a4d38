// A simulated host: an RNIC running the real transport core (rnic::Transport)
// behind a NIC that drains its TX descriptors at line rate, feeds it received
// frames and calls it at the deadlines it asks for; its registered memory;
// and the application side of the workload (posting messages, checking
// completions and the bytes that arrived).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/wire/roce_packet.h"
#include "rnic/core/transport.h"
#include "rnic/sim/arena.h"
#include "rnic/sim/conn_gate.h"
#include "rnic/sim/event_queue.h"
#include "rnic/sim/fabric.h"
#include "rnic/sim/frame_pool.h"
#include "rnic/sim/host_jitter.h"
#include "rnic/sim/rng.h"

namespace tandem::rnic::sim {

// Transport settings of one policy (scenario `transport:` merged with the
// policy's own keys).
struct HostOptions {
  Reliability mode = Reliability::kIrn;
  std::string path_policy = "single";
  std::string cc_policy = "fixed_window";
  uint64_t cc_window_bytes = 1ull << 20;  // 0 in a scenario's options: "auto" (the largest base BDP)
  bool int_telemetry = false;             // switches stamp INT on data frames, ACKs echo it (HPCC)
  uint32_t num_paths = 1;
  bool path_seed_search = true;  // pick each QP's path seed so its path set covers distinct routes
  bool nic_spray = false;        // the NIC sprays per packet over discovered paths (overrides the core's port)
  uint32_t spray_paths = 64;
  uint32_t qps_per_flow = 1;
  uint32_t mtu = 4096;
  uint64_t timeout_ns = 1'000'000;
  uint8_t retry_cnt = 7;
  uint64_t reorder_delay_ns = 50'000;
  uint32_t ack_every = 16;
  uint64_t cnp_interval_ns = 0;  // responder sends CNPs for CE-marked requests (0: only ECN echo in ACKs)
  uint32_t window_pkts = 1024;
  uint32_t tx_queue_capacity = 64;
  double line_rate_gbps = 100;         // dcqcn: start/max rate (default: the host link rate)
  uint64_t credit_unsched_bytes = 64 << 10;  // credit: sent before any credit (~1 BDP)
  double credit_rate_gbps = 100;       // credit: the receiver's capacity (default: host link rate)
  uint32_t credit_window_pkts = 32;    // credit: receiver's outstanding credit over all senders (~1 BDP)
  bool jitter_mitigation = false;      // credit: headroom + batched grants
  uint32_t credit_headroom_pkts = 64;  // credit: with mitigation
  uint32_t credit_batch_pkts = 4;      // credit: with mitigation
  uint64_t credit_jitter_ns = 0;       // processing delay of each ACK (the credit loop), uniform [0, this]
  bool host_jitter = true;  // the scenario's `hosts:` jitter applies (off: a same-run baseline without it)
  bool send_op = false;  // SEND/RECV instead of RDMA WRITE
  bool read_op = false;  // RDMA READ: the flow's source reads from its destination
};

// One QP pair carrying part of a flow's messages, `outstanding` at a time,
// each message in its own slot of the sender's and the receiver's memory.
struct Conn {
  uint32_t index = 0;
  uint32_t src = 0;
  uint32_t dst = 0;
  uint32_t src_qpn = 0;
  uint32_t dst_qpn = 0;
  uint32_t qp_in_flow = 0;  // which of the flow's qps_per_flow connections
  int32_t twin = -1;        // bidirectional: the connection whose QP pair this one uses backwards
  uint64_t start_ns = 0;
  bool measured = true;     // starts inside the workload's measurement window
  std::vector<uint64_t> sizes;
  uint32_t outstanding = 1;
  uint64_t slot_bytes = 0;
  uint64_t send_off = 0;  // offset of slot 0 in the sender's arena
  uint64_t recv_off = 0;  // ... in the receiver's arena
  bool dynamic_mem = false;  // open loop: both ends' slots are taken at start and given back when done
  uint32_t next_post = 0;
  uint32_t next_recv = 0;  // SEND: RECVs posted
  uint32_t completed = 0;
  uint32_t verified = 0;
  std::vector<uint64_t> post_ns;
};

// One completed message: what the FCT slowdown needs.
struct MessageDone {
  uint32_t conn = 0;
  uint32_t msg = 0;
  uint64_t fct_ns = 0;
};

struct WorkloadTotals {
  uint64_t messages = 0;
  uint64_t completed = 0;
  uint64_t measured = 0;            // messages of measured connections
  uint64_t measured_completed = 0;  // ... completed (with success or not)
  uint64_t errors = 0;
  uint64_t mismatches = 0;
  uint64_t verified = 0;
  uint64_t bytes = 0;
  uint64_t first_post_ns = ~0ull;
  uint64_t last_completion_ns = 0;
  std::vector<uint64_t> fct_ns;
  std::vector<MessageDone> done;  // per completed message, when slowdown is reported
  bool keep_done = false;
};

struct NicCounters {
  uint64_t data_pkts = 0;
  uint64_t retx_pkts = 0;
  uint64_t retx_bytes = 0;
  uint64_t rx_frames = 0;
  uint64_t rx_parse_drops = 0;  // frames that failed parse_roce (bad ICRC, ...)
  uint64_t rx_rejected = 0;     // frames on_packet refused
  uint32_t reorder_depth_max = 0;  // largest PSN distance a request arrived behind the highest seen
  uint64_t stalls = 0;             // host jitter: times the loop stalled
  uint64_t stalled_ns = 0;         // ... for how long in all
  uint64_t rx_ring_drops = 0;      // frames the RX ring could not hold while stalled
  uint64_t route_drops = 0;        // frames the gate dropped: the connection's route was gone
  uint32_t rx_backlog_max = 0;     // most frames waiting in the RX ring
};

class SimHost {
 public:
  SimHost(uint32_t index, const HostOptions& opt, Fabric& fabric, EventQueue& events, FramePool& frames,
          std::vector<Conn>& conns, std::vector<std::unique_ptr<SimHost>>& hosts, WorkloadTotals& totals,
          const HostJitterSpec& jitter = {});

  // Set-up, in this order for all hosts: add_arena_bytes, finish_memory,
  // create_qps, connect_qps.
  void add_arena_bytes(uint64_t n) noexcept { arena_size_ += n; }
  void finish_memory(uint32_t qps);
  void create_qp_for(Conn& c, bool sender);
  void connect_qp(Conn& c, bool sender, uint32_t rq_psn, uint32_t sq_psn, uint16_t path_seed);
  uint16_t choose_path_seed(const Conn& c, bool sender, uint32_t base) const;

  // Event handlers.
  void on_frame(uint32_t frame, uint64_t now);
  void on_nic_idle(uint64_t now);
  // A gate that checks every packet's route (ConnGate::checks_egress).
  void set_gate(ConnGate* gate) noexcept { gate_ = gate; }
  void on_timer(uint64_t generation, uint64_t now);
  void start_conn(Conn& c, uint64_t now);  // the sender posts its first messages
  void post_initial_recvs(Conn& c);
  void send_delayed(uint32_t frame, uint64_t now);  // a jittered ACK leaves now
  void on_stall_event(uint64_t what, uint64_t now);  // host jitter: stall (0), resume (1), backlog (2)
  void on_app(uint64_t now);                         // the late application wakes up

  const Transport& transport() const noexcept { return *transport_; }
  // When the first data for local QP `qpn` arrived (0: none yet).
  uint64_t first_rx_ns(uint32_t qpn) const noexcept {
    const uint32_t q = qpn - qpn_base_;
    return q < first_rx_.size() ? first_rx_[q] : 0;
  }
  const NicCounters& nic() const noexcept { return nic_; }
  uint64_t arena_addr() const noexcept { return mr_.addr; }
  uint8_t* arena() noexcept { return arena_.get(); }
  // A connection is finished at this end: its slots go back (to this host's
  // slot allocator for open-loop connections, else their pages to the kernel).
  void release_slots(const Conn& c, uint64_t off, uint64_t len) {
    if (c.dynamic_mem) {
      // Small blocks stay warm for the next flow; large ones (rare, but most
      // of the bytes) go back, or the resident set would be every class's peak.
      if (Slots::block(len) >= Slots::kHuge) arena_.release(off, Slots::block(len));
      slots_.free(off, len);
    } else {
      arena_.release(off, len);
    }
  }
  uint64_t take_slots(uint64_t len) { return slots_.alloc(len); }

 private:
  void service(uint64_t now);
  void receive(uint32_t frame, uint64_t now);
  void reap(uint64_t now);  // the application handles the completions it has polled
  void note_arrival_order(const common::RocePacket& pkt) noexcept;
  void drain_cq(uint64_t now);
  void post_message(Conn& c, uint64_t now);
  void post_recv(Conn& c);
  void kick_nic(uint64_t now);
  bool send_one(uint64_t now);  // one descriptor to the wire; false: the gate dropped it (try the next)
  void arm_timer(uint64_t now);
  const std::vector<uint16_t>& spray_set(uint32_t peer_host);

  uint32_t index_;
  const HostOptions& opt_;
  Fabric& fabric_;
  EventQueue& events_;
  FramePool& frames_;
  std::vector<Conn>& conns_;
  std::vector<std::unique_ptr<SimHost>>& hosts_;
  WorkloadTotals& totals_;
  std::unique_ptr<Transport> transport_;
  Arena arena_;
  Slots slots_;  // open-loop connections' slots
  uint64_t arena_size_ = 0;
  MemoryRegion mr_;
  uint32_t cq_ = 0;
  uint64_t timer_at_ = kNever;
  uint64_t timer_gen_ = 0;
  NicCounters nic_;
  std::vector<std::vector<uint16_t>> spray_sets_;  // per peer host, discovered lazily
  std::vector<uint32_t> spray_next_;
  std::vector<uint32_t> rx_high_psn_;  // per local QP: highest request PSN seen
  std::vector<uint8_t> rx_seen_;
  Rng jitter_rng_;
  ConnGate* gate_ = nullptr;
  uint32_t qpn_base_ = 0;
  // Host jitter (host_jitter.h).
  HostJitterSpec jit_;
  StallClock stall_clock_;
  bool stalled_ = false;
  bool app_armed_ = false;
  std::deque<uint32_t> rx_backlog_;     // frames in the RX ring while the loop stalls or catches up
  std::vector<Conn*> deferred_starts_;  // workload starts that fell into a stall
  std::vector<Completion> cqes_;        // completions polled, not yet handled by the application
  std::vector<IntEcho> rx_int_;         // per local QP: the INT its latest data frame collected
  std::vector<uint64_t> first_rx_;      // per local QP: when its first data arrived
};

}  // namespace tandem::rnic::sim
