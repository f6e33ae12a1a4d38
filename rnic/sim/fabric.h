// The simulated network: nodes (hosts and switches) joined by one-way links,
// each driven by an egress port with a byte-limited output queue, ECN marking
// at a threshold and tail drop. Switches route by destination host over all
// shortest paths and pick among them with the shared ECMP 5-tuple hash, so
// the UDP source port a sender chooses decides the path, as on a real fabric.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rnic/sim/event_queue.h"
#include "rnic/sim/frame_pool.h"
#include "rnic/sim/ring.h"
#include "rnic/sim/rng.h"

namespace tandem::rnic::sim {

struct LinkParams {
  uint64_t rate_bps = 100'000'000'000ull;
  uint64_t delay_ns = 1000;   // propagation
  uint64_t jitter_ns = 0;     // extra delay, uniform in [0, jitter] (FIFO kept)
  double loss = 0;            // probability a frame is lost on the wire
};

struct QueueParams {
  uint64_t limit_bytes = 1 << 20;  // tail drop beyond this
  uint64_t ecn_bytes = 0;          // mark CE when the queue holds at least this (0: never)
  // RED-style marking as a frame leaves (HPCC's switches): above kmin with
  // probability pmax * (q - kmin) / (kmax - kmin), always above kmax, q the
  // bytes still queued. 0: off. Thresholds scale with the port's rate when
  // red_at_bps is set (they are given for that rate).
  uint64_t red_kmin_bytes = 0;
  uint64_t red_kmax_bytes = 0;
  double red_pmax = 0;
  uint64_t red_at_bps = 0;
};

// Ethernet preamble, start delimiter, FCS and inter-frame gap: the bytes a
// frame costs on the wire beyond what the simulator carries.
inline constexpr uint32_t kWireOverhead = 24;

constexpr uint64_t serialization_ns(uint64_t bytes, uint64_t rate_bps) noexcept {
  return rate_bps == 0 ? 0 : ((bytes + kWireOverhead) * 8 * 1'000'000'000ull + rate_bps - 1) / rate_bps;
}

struct PortStats {
  uint64_t tx_frames = 0;
  uint64_t tx_bytes = 0;
  uint64_t max_queue_bytes = 0;
  uint64_t drops_queue = 0;  // tail drop
  uint64_t drops_loss = 0;   // random loss on the wire
  uint64_t drops_down = 0;   // the link was down
  uint64_t ecn_marks = 0;
};

// An egress port is a FIFO served at the link rate, so a frame's departure
// is known when it is queued: it starts when the frames ahead of it are out.
// The fabric schedules its arrival at the far end at once (one event per
// hop; host ports also get a "done" event, to pull the NIC's next frame).
// What happens as a frame leaves a switch (RED marking, INT) needs the
// bytes queued behind it then, which only later enqueues decide: the port
// keeps a short history of its enqueues and the arrival event settles it.
struct Port {
  uint32_t node = 0;
  uint32_t peer = 0;
  uint32_t link = 0;  // the named (two-way) link this port belongs to
  LinkParams params;
  QueueParams queue_params;
  bool up = true;        // the wire carries frames
  bool routable = true;  // switches still hash onto it (false once routing converged around a failure)
  bool host_side = false;     // a host's NIC port
  uint64_t busy_until = 0;    // when the last frame queued has been serialised
  uint64_t last_arrival = 0;  // jitter delays frames but a link never reorders them
  uint64_t queue_bytes = 0;   // waiting (not yet started) as of the last enqueue
  uint64_t enq_bytes = 0;     // bytes accepted so far
  uint64_t int_tx_bytes = 0;  // bytes sent, wire overhead included: INT's running count
  uint64_t down_at = ~0ull;   // the last failure; ~0: never failed
  uint64_t up_at = 0;         // the last recovery
  struct Waiting {
    uint64_t start;
    uint32_t bytes;
  };
  Ring<Waiting> waiting;      // queued frames not started yet, by start time
  struct Enqueued {
    uint64_t at;
    uint64_t bytes;           // enq_bytes after it
  };
  Ring<Enqueued> history;     // recent enqueues (switch ports): the queue a frame left behind
  PortStats stats;
  Rng rng{0};
  Rng red_rng{0};
};

struct Node {
  bool is_host = false;
  uint32_t host = 0;  // host index if is_host
  std::string name;
  uint32_t ecmp_seed = 0;
  std::vector<uint32_t> ports;  // egress ports
  uint32_t sw = 0;     // switches: index among the switches (the routing table's row)
  uint32_t edge = 0;   // hosts: index of the switch they hang off among the edge switches
};

struct NamedLink {
  std::string name;
  std::vector<uint32_t> ports;  // both directions
};

struct FabricStats {
  uint64_t drops_queue = 0;
  uint64_t drops_loss = 0;
  uint64_t drops_down = 0;
  uint64_t drops_no_route = 0;
  uint64_t ecn_marks = 0;
  uint64_t max_queue_bytes = 0;  // over switch ports
  uint64_t drops() const noexcept { return drops_queue + drops_loss + drops_down + drops_no_route; }
};

// Host IPv4 addresses are 10.x.y.z with the host index in the low 24 bits.
constexpr uint32_t host_ip(uint32_t host) noexcept { return 0x0A000000u | (host + 1); }
constexpr uint32_t ip_host(uint32_t ip) noexcept { return (ip & 0xFFFFFFu) - 1; }

// Reads the 5-tuple of an IPv4/UDP frame (optionally 802.1Q tagged); false if
// the frame is not IPv4.
bool frame_five_tuple(const uint8_t* data, uint32_t len, uint32_t& src_ip, uint32_t& dst_ip,
                      uint16_t& sport, uint16_t& dport, uint8_t& proto) noexcept;

// Sets the IPv4 ECN field to CE (if the frame is ECN-capable) and patches the
// header checksum; returns whether it marked.
bool mark_ce(uint8_t* data, uint32_t len) noexcept;
// Sets ECT(0) on a not-ECT frame (what a RoCEv2 NIC does on egress).
void set_ect0(uint8_t* data, uint32_t len) noexcept;
// Whether the frame carries CE.
bool frame_ce(const uint8_t* data, uint32_t len) noexcept;

class Fabric {
 public:
  // Called when a frame reaches a host; the host owns the frame from then on
  // (it must release it to the pool).
  using DeliverFn = std::function<void(uint32_t host, uint32_t frame, uint64_t now)>;
  // Called when a host's egress port has nothing queued and the wire is free.
  using IdleFn = std::function<void(uint32_t host, uint64_t now)>;

  Fabric(EventQueue& events, FramePool& frames, uint64_t seed) : events_(events), frames_(frames), seed_(seed) {}

  uint32_t add_host(const std::string& name);
  uint32_t add_switch(const std::string& name);
  // A two-way link between nodes a and b; returns the named link index.
  uint32_t connect(uint32_t a, uint32_t b, const LinkParams& params, const QueueParams& queue,
                   const std::string& name);
  // Shortest-path ECMP routes over routable ports; called after building and
  // whenever routing converges after a failure.
  void compute_routes();

  void set_callbacks(DeliverFn deliver, IdleFn idle) {
    deliver_ = std::move(deliver);
    idle_ = std::move(idle);
  }

  // A host hands a frame to its NIC port (the frame is queued behind others).
  void send_from_host(uint32_t host, uint32_t frame, uint64_t now);
  bool host_port_idle(uint32_t host, uint64_t now) const noexcept;

  // Link failure and recovery; `failover_ns` later (if set) the switches
  // route around the failed link, and on recovery they route over it again.
  // `direction` 0 or 1: only that port of the link (a one-way black hole,
  // which routing never notices); -1 both.
  void set_link_state(uint32_t link, bool up, uint64_t now, uint64_t failover_ns, int direction = -1);

  // Runs an event of a kind the fabric schedules (tx done, arrival, route
  // update); false for any other kind.
  bool handle(const Event& e);
  // Event dispatch for the kinds the fabric schedules.
  void on_tx_done(uint32_t port, uint64_t now);
  void on_arrive(uint32_t port, uint32_t frame, uint64_t now);
  void on_route_update(uint32_t link, bool routable);

  FabricStats stats() const noexcept;
  const std::vector<Port>& ports() const noexcept { return ports_; }
  const std::vector<Node>& nodes() const noexcept { return nodes_; }
  const std::vector<NamedLink>& links() const noexcept { return links_; }
  int find_link(const std::string& name) const noexcept;
  uint32_t host_node(uint32_t host) const noexcept { return host_nodes_[host]; }
  uint32_t host_count() const noexcept { return static_cast<uint32_t>(host_nodes_.size()); }
  uint64_t drops_no_route() const noexcept { return drops_no_route_; }

  // The equal-cost egress ports of `node` (a switch) towards `dst_host`.
  std::vector<uint32_t> route_group(uint32_t node, uint32_t dst_host) const;
  // The egress port a switch picks for this frame (for tests and for
  // choosing entropy values that cover every path).
  int route(uint32_t node, uint32_t dst_host, uint32_t src_ip, uint32_t dst_ip, uint16_t sport,
            uint16_t dport, uint8_t proto) const noexcept;
  // The same from the tuple's ecmp_key (common/fabric/ecmp.h), as forwarding does.
  int route_key(uint32_t node, uint32_t dst_host, uint64_t key) const noexcept;

 private:
  void enqueue(uint32_t port, uint32_t frame, uint64_t now);
  // As a frame that left switch port `p` at `start` arrives: the bytes
  // queued behind it then, RED marking and INT.
  void on_departed(Port& p, Frame& f) noexcept;
  void forward(uint32_t node, uint32_t frame, uint64_t now);
  void drop(uint32_t frame) noexcept { frames_.release(frame); }

  EventQueue& events_;
  FramePool& frames_;
  uint64_t seed_;
  std::vector<Node> nodes_;
  std::vector<Port> ports_;
  std::vector<NamedLink> links_;
  std::vector<uint32_t> host_nodes_;
  // Routing: every host hangs off one switch (its edge); a switch routes to
  // a host by its edge switch, so the table is switches x edge switches of
  // ids into interned groups of equal-cost ports (group 0: no route), and
  // the edge switch hands the frame to the host's own link.
  uint32_t switches_ = 0;
  std::vector<uint32_t> edges_;            // edge switches' nodes
  std::vector<uint32_t> host_port_;        // per host: the edge switch's port to it
  std::vector<std::vector<uint32_t>> groups_;
  std::vector<uint32_t> route_tab_;        // [switch * edges + edge] -> group
  std::vector<std::vector<uint32_t>> in_ports_;  // per node: ports that arrive at it
  uint64_t drops_no_route_ = 0;
  DeliverFn deliver_;
  IdleFn idle_;
};

}  // namespace tandem::rnic::sim
