#include "rnic/sim/report.h"

#include <cstdio>

namespace tandem::rnic::sim {

nlohmann::ordered_json results_json(const Scenario& s, uint64_t seed, const std::vector<RunResult>& results) {
  nlohmann::ordered_json j;
  j["scenario"] = s.name;
  j["seed"] = seed;
  auto& arr = j["results"] = nlohmann::ordered_json::array();
  for (const RunResult& r : results) {
    nlohmann::ordered_json o;
    o["policy"] = r.policy;
    o["fct_us_mean"] = r.fct_us_mean;
    o["fct_us_p50"] = r.fct_us_p50;
    o["fct_us_p99"] = r.fct_us_p99;
    o["fct_us_max"] = r.fct_us_max;
    o["goodput_gbps"] = r.goodput_gbps;
    o["retx_bytes"] = r.retx_bytes;
    o["retx_pkts"] = r.retx_pkts;
    o["data_pkts"] = r.data_pkts;
    o["drops"] = r.drops;
    o["data_ok"] = r.data_ok;
    o["messages"] = r.messages;
    o["completed"] = r.completed;
    o["error_completions"] = r.error_completions;
    o["data_mismatches"] = r.data_mismatches;
    o["bytes"] = r.bytes;
    o["timeouts"] = r.timeouts;
    o["naks"] = r.naks;
    o["sacks"] = r.sacks;
    o["cnps"] = r.cnps;
    o["drops_queue"] = r.drops_queue;
    o["drops_loss"] = r.drops_loss;
    o["drops_link_down"] = r.drops_link_down;
    o["drops_no_route"] = r.drops_no_route;
    o["rx_rejected"] = r.rx_rejected;
    o["ecn_marks"] = r.ecn_marks;
    o["max_queue_bytes"] = r.max_queue_bytes;
    o["reorder_depth_max"] = r.reorder_depth_max;
    o["core_reorder_depth_max"] = r.core_reorder_depth_max;
    if (!r.path_frames.empty()) o["path_frames"] = r.path_frames;
    o["path_removals"] = r.path_removals;
    if (!r.path_removals_per_path.empty()) {
      o["path_removals_per_path"] = r.path_removals_per_path;
      o["path_silent_removals_per_path"] = r.path_silent_removals_per_path;
      o["path_loss_removals_per_path"] = r.path_loss_removals_per_path;
      o["path_stall_excused_per_path"] = r.path_stall_excused_per_path;
      o["path_first_removal_us"] = r.path_first_removal_us;
      o["path_lost_fwd"] = r.path_lost_fwd;
      o["path_lost_rev"] = r.path_lost_rev;
      o["ack_path_removals_per_path"] = r.ack_path_removals_per_path;
    }
    o["path_loss_removals"] = r.path_loss_removals;
    o["path_silent_removals"] = r.path_silent_removals;
    o["path_stall_excused"] = r.path_stall_excused;
    o["path_returns"] = r.path_returns;
    o["path_losses"] = r.path_losses;
    o["first_path_removal_us"] = r.first_path_removal_us;
    o["last_path_return_us"] = r.last_path_return_us;
    o["ack_losses"] = r.ack_losses;
    o["ack_path_removals"] = r.ack_path_removals;
    o["credits_granted"] = r.credits_granted;
    o["credit_kicks"] = r.credit_kicks;
    o["credit_kicks_excused"] = r.credit_kicks_excused;
    o["loop_gaps"] = r.loop_gaps;
    o["credits_received"] = r.credits_received;
    o["credits_used"] = r.credits_used;
    o["credit_stalls"] = r.credit_stalls;
    o["rate_cuts"] = r.rate_cuts;
    o["min_rate_gbps"] = r.min_rate_gbps;
    o["qp_path_pkts"] = r.qp_path_pkts;
    o["host_stalls"] = r.host_stalls;
    o["host_stalled_us"] = r.host_stalled_us;
    o["rx_ring_drops"] = r.rx_ring_drops;
    o["rx_backlog_max"] = r.rx_backlog_max;
    if (!r.slowdown.empty()) {
      auto& sl = o["slowdown"] = nlohmann::ordered_json::array();
      for (const SlowdownBucket& b : r.slowdown) {
        sl.push_back({{"max_bytes", b.max_bytes}, {"flows", b.flows}, {"p50", b.p50}, {"p95", b.p95}, {"p99", b.p99}});
      }
    }
    o["ttfb_conns"] = r.ttfb_conns;
    o["ttfb_us_p50"] = r.ttfb_us_p50;
    o["ttfb_us_p99"] = r.ttfb_us_p99;
    o["ttfb_us_max"] = r.ttfb_us_max;
    if (!r.gate_json.empty()) o["dpu"] = nlohmann::ordered_json::parse(r.gate_json);
    o["sim_time_us"] = r.sim_time_us;
    o["events"] = r.events;
    o["events_by_kind"] = r.events_by_kind;
    o["stop_reason"] = r.stop_reason;
    arr.push_back(std::move(o));
  }
  return j;
}

void print_table(std::ostream& out, const Scenario& s, uint64_t seed, const std::vector<RunResult>& results) {
  out << "scenario " << s.name << " (seed " << seed << ")\n";
  if (!s.description.empty()) out << "  " << s.description << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-16s %9s %9s %9s %8s %10s %8s %7s %6s %8s %8s %7s %s\n", "policy", "fct_mean",
                "fct_p50", "fct_p99", "gbps", "retx_bytes", "drops", "reorder", "tmo", "maxq_kb", "done", "data_ok",
                "stop");
  out << line;
  for (const RunResult& r : results) {
    std::snprintf(line, sizeof line, "%-16s %9.1f %9.1f %9.1f %8.2f %10llu %8llu %7u %6llu %8.1f %4llu/%-4llu %7s %s\n",
                  r.policy.c_str(), r.fct_us_mean, r.fct_us_p50, r.fct_us_p99, r.goodput_gbps,
                  static_cast<unsigned long long>(r.retx_bytes), static_cast<unsigned long long>(r.drops),
                  r.reorder_depth_max, static_cast<unsigned long long>(r.timeouts), r.max_queue_bytes / 1024.0,
                  static_cast<unsigned long long>(r.completed), static_cast<unsigned long long>(r.messages),
                  r.data_ok ? "yes" : "NO", r.stop_reason.c_str());
    out << line;
  }
  out << "(times in us; reorder = most PSNs a request arrived behind the highest already received; tmo = timeouts)\n";
  for (const RunResult& r : results) {
    if (r.slowdown.empty()) continue;
    out << "FCT slowdown by flow size, " << r.policy << " (bucket = " << s.slowdown_step_pct
        << "% of the flows; p50 p95 p99):\n";
    for (const SlowdownBucket& b : r.slowdown) {
      std::snprintf(line, sizeof line, "  <= %10llu B  %5u flows  %7.2f %7.2f %7.2f\n",
                    static_cast<unsigned long long>(b.max_bytes), b.flows, b.p50, b.p95, b.p99);
      out << line;
    }
  }
}

}  // namespace tandem::rnic::sim
