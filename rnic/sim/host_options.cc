#include "rnic/sim/host_options.h"

#include <algorithm>
#include <cstdlib>

namespace tandem::rnic::sim {

namespace {

struct Reader {
  const std::string& policy;
  std::map<std::string, std::string> kv;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw ScenarioError("policy '" + policy + "': " + key + " " + what);
  }
  bool take(const std::string& key, std::string& out) {
    auto it = kv.find(key);
    if (it == kv.end()) return false;
    out = it->second;
    kv.erase(it);
    return true;
  }
  double number(const std::string& key, double dflt, double lo, double hi) {
    std::string v;
    if (!take(key, v)) return dflt;
    char* end = nullptr;
    double d = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') fail(key, "must be a number, not '" + v + "'");
    if (d < lo || d > hi) fail(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return d;
  }
  bool flag(const std::string& key, bool dflt) {
    std::string v;
    if (!take(key, v)) return dflt;
    if (v == "true" || v == "yes" || v == "on") return true;
    if (v == "false" || v == "no" || v == "off") return false;
    fail(key, "must be true or false");
  }
};

}  // namespace

HostOptions parse_host_options(const Scenario& s, const PolicySpec& p) {
  Reader r{p.name, s.transport};
  for (const auto& [k, v] : p.options) r.kv[k] = v;
  HostOptions o;
  std::string v;
  if (r.take("mode", v)) {
    if (v == "go_back_n") {
      o.mode = Reliability::kGoBackN;
    } else if (v == "irn") {
      o.mode = Reliability::kIrn;
    } else {
      r.fail("mode", "must be go_back_n or irn, not '" + v + "'");
    }
  }
  r.take("path", o.path_policy);
  r.take("cc", o.cc_policy);
  std::string win;
  if (r.take("cc_window_kb", win) && win == "auto") {
    o.cc_window_bytes = 0;  // the fabric's largest base BDP (Simulation fills it in)
  } else {
    if (!win.empty()) r.kv["cc_window_kb"] = win;
    o.cc_window_bytes = static_cast<uint64_t>(r.number("cc_window_kb", 1024, 1, 1 << 20) * 1024);
  }
  // HPCC needs the switches' INT; any policy may be given it.
  o.int_telemetry = r.flag("int", o.cc_policy.rfind("hpcc", 0) == 0);
  o.num_paths = static_cast<uint32_t>(r.number("num_paths", 1, 1, 256));
  o.path_seed_search = r.flag("path_seed_search", true);
  if (r.take("nic_spray", v)) {
    if (v == "round_robin") {
      o.nic_spray = true;
    } else if (v != "none") {
      r.fail("nic_spray", "must be none or round_robin, not '" + v + "'");
    }
  }
  o.spray_paths = static_cast<uint32_t>(r.number("spray_paths", 64, 1, 1024));
  o.qps_per_flow = static_cast<uint32_t>(r.number("qps_per_flow", 1, 1, 64));
  o.mtu = static_cast<uint32_t>(r.number("mtu", 4096, 256, 4096));
  if ((o.mtu & (o.mtu - 1)) != 0) r.fail("mtu", "must be 256, 512, 1024, 2048 or 4096");
  o.timeout_ns = static_cast<uint64_t>(r.number("timeout_us", 1000, 1, 1e9) * 1000);
  o.retry_cnt = static_cast<uint8_t>(r.number("retry_cnt", 7, 0, 7));
  o.reorder_delay_ns = static_cast<uint64_t>(r.number("reorder_delay_us", 50, 0, 1e9) * 1000);
  o.ack_every = static_cast<uint32_t>(r.number("ack_every", 16, 1, 1 << 16));
  o.cnp_interval_ns = static_cast<uint64_t>(r.number("cnp_interval_us", 0, 0, 1e9) * 1000);
  o.window_pkts = static_cast<uint32_t>(r.number("window_pkts", 1024, 1, 1 << 16));
  o.tx_queue_capacity = static_cast<uint32_t>(r.number("tx_queue", 64, 1, 1 << 16));
  const double link_gbps = static_cast<double>(s.topology.host_link.rate_bps) / 1e9;
  o.line_rate_gbps = r.number("line_rate_gbps", link_gbps, 0.001, 1e4);
  o.credit_unsched_bytes = static_cast<uint64_t>(r.number("credit_unsched_kb", 64, 0.25, 1 << 20) * 1024);
  o.credit_rate_gbps = r.number("credit_rate_gbps", link_gbps, 0.001, 1e4);
  o.credit_window_pkts = static_cast<uint32_t>(
      std::max(1.0, r.number("credit_window_kb", 128, 0.25, 1 << 20) * 1024 / o.mtu));
  o.jitter_mitigation = r.flag("jitter_mitigation", false);
  o.credit_headroom_pkts = static_cast<uint32_t>(
      r.number("credit_headroom_kb", 256, 0, 1 << 20) * 1024 / o.mtu);
  o.credit_batch_pkts = static_cast<uint32_t>(r.number("credit_batch", 4, 1, 1024));
  o.credit_jitter_ns = static_cast<uint64_t>(r.number("credit_jitter_us", 0, 0, 1e6) * 1000);
  o.host_jitter = r.flag("host_jitter", true);
  o.send_op = s.workload.op == WorkloadSpec::Op::kSend;
  o.read_op = s.workload.op == WorkloadSpec::Op::kRead;
  if (!r.kv.empty()) r.fail(r.kv.begin()->first, "is not a known option");
  return o;
}

}  // namespace tandem::rnic::sim
