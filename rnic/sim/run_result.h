// What one run of one policy measured: message completion times, goodput,
// fabric queues and drops, transport recovery work, and whether every byte
// arrived as sent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::rnic::sim {

// FCT slowdown of one bucket of flows (flows sorted by size, cut into
// equal counts as HPCC's fct_analysis.py): the largest size in it and the
// percentiles of FCT / ideal FCT (at least 1).
struct SlowdownBucket {
  uint64_t max_bytes = 0;
  uint32_t flows = 0;
  double p50 = 0, p95 = 0, p99 = 0;
};

struct RunResult {
  std::string policy;
  uint64_t seed = 0;
  uint64_t messages = 0;        // posted by the workload
  uint64_t completed = 0;       // completed with success at the sender
  uint64_t error_completions = 0;
  uint64_t bytes = 0;           // payload bytes of completed messages
  double fct_us_mean = 0;
  double fct_us_p50 = 0;
  double fct_us_p99 = 0;
  double fct_us_max = 0;
  double goodput_gbps = 0;      // completed bytes over the time from first post to last completion
  double sim_time_us = 0;       // when the last event ran
  uint64_t data_pkts = 0;       // request/response data packets sent by NICs
  uint64_t retx_pkts = 0;       // of them, retransmissions
  uint64_t retx_bytes = 0;
  uint64_t timeouts = 0;
  uint64_t naks = 0;            // PSN-sequence and other NAKs sent by responders
  uint64_t sacks = 0;           // SACK packets sent by responders
  uint64_t cnps = 0;            // CNPs requesters received
  uint64_t drops = 0;           // frames the fabric dropped, all reasons
  uint64_t drops_queue = 0;
  uint64_t drops_loss = 0;
  uint64_t drops_link_down = 0;
  uint64_t drops_no_route = 0;
  uint64_t rx_rejected = 0;     // frames the receiving transport refused (duplicates, out of window, ...)
  uint64_t ecn_marks = 0;
  uint64_t max_queue_bytes = 0; // deepest switch queue
  uint32_t reorder_depth_max = 0;       // as the receiving NICs saw it (PSNs behind the highest)
  uint32_t core_reorder_depth_max = 0;  // the core's own counter (IRN mode only)
  uint64_t events = 0;
  std::vector<uint64_t> events_by_kind;  // by EventKind
  uint64_t host_stalls = 0;     // host jitter: loop stalls over all hosts
  double host_stalled_us = 0;   // ... their total length
  uint64_t rx_ring_drops = 0;   // frames stalled hosts' RX rings could not hold
  uint32_t rx_backlog_max = 0;  // deepest RX backlog a stalled host worked off
  uint64_t data_mismatches = 0; // messages whose bytes at the receiver differ from what was sent
  bool data_ok = false;         // every message completed and every byte matched
  std::string stop_reason;      // "done", "time limit", "stalled"
  std::vector<uint64_t> path_frames;  // parallel topology: frames over each path, forward direction
  // Policy counters (rnic/core path and CC policies), summed over sender QPs.
  uint64_t path_removals = 0;   // path health took a path out
  uint64_t path_returns = 0;    // ... and a probe brought it back
  uint64_t path_losses = 0;     // losses the path policies were told about
  uint64_t path_loss_removals = 0;    // removals by loss evidence
  uint64_t path_silent_removals = 0;  // removals by silence
  uint64_t path_stall_excused = 0;    // silences a host stall excused (no removal)
  uint64_t loop_gaps = 0;             // cores' calls further apart than their loop period (all hosts)
  uint64_t credit_kicks_excused = 0;  // grantors: kicks held back after their own stall
  double first_path_removal_us = 0;  // earliest removal (0: none)
  double last_path_return_us = 0;    // latest return of a removed path (0: none)
  uint64_t ack_losses = 0;        // receivers: ACKs their path policies found lost (duplicates)
  uint64_t ack_path_removals = 0; // receivers: ACK paths taken out for it
  uint64_t credits_granted = 0;  // receivers: packets of credit granted
  uint64_t credit_kicks = 0;     // receivers: credit kicks to silent senders
  uint64_t credits_received = 0; // senders: credit that arrived on ACKs
  uint64_t credits_used = 0;     // senders: packets sent against credit
  uint64_t credit_stalls = 0;    // senders: times a packet waited for credit
  uint64_t rate_cuts = 0;        // dcqcn: CNPs that cut a rate
  double min_rate_gbps = 0;      // dcqcn: lowest rate any QP reached
  // Parallel topology, per path (by the route a QP's source port takes):
  // removals by the senders' path health (all, and by its silence rule), and
  // frames the path lost (down, random loss, tail drop) forward (requests)
  // and reverse (the responders' ACKs, CNPs, READ responses).
  std::vector<uint64_t> path_removals_per_path;
  std::vector<uint64_t> path_silent_removals_per_path;
  std::vector<uint64_t> path_loss_removals_per_path;
  std::vector<uint64_t> path_stall_excused_per_path;
  std::vector<double> path_first_removal_us;  // earliest removal of each path by any sender QP (0: never)
  std::vector<uint64_t> path_lost_fwd;
  std::vector<uint64_t> path_lost_rev;
  // Scenario slowdown_step_pct: FCT slowdown by flow size (the ideal FCT: the
  // flow alone, HPCC's way: base RTT + its wire bytes at the bottleneck).
  std::vector<SlowdownBucket> slowdown;
  // Time to first byte: a connection's planned start to its first data at
  // the responder, over the (measured) connections that got one.
  uint64_t ttfb_conns = 0;
  double ttfb_us_p50 = 0, ttfb_us_p99 = 0, ttfb_us_max = 0;
  std::string gate_json;  // the connection gate's figures (the DPU model), a JSON object
  // The receivers' ACK-path removals, by the route (reverse) each ACK path takes.
  std::vector<uint64_t> ack_path_removals_per_path;
  // Per sender QP (the first 64): packets per path of its path set.
  std::vector<std::vector<uint64_t>> qp_path_pkts;
};

}  // namespace tandem::rnic::sim
