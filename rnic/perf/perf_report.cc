#include "rnic/perf/perf_report.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace tandem::rnic::perf {

namespace {
constexpr const char* kRule =
    "---------------------------------------------------------------------------------------\n";

std::string policy(const std::string& s) { return s.empty() ? "worker default" : s; }
}  // namespace

std::string format_mismatch(const Mismatch& m) {
  char b[160];
  std::snprintf(b, sizeof b, "QP %u message %llu offset %llu: expected 0x%02x, got 0x%02x", m.qp,
                static_cast<unsigned long long>(m.iteration), static_cast<unsigned long long>(m.offset),
                m.expected, m.got);
  return b;
}

std::string format_header(const RunReport& r) {
  const Options& o = r.options;
  std::string s = kRule;
  char b[512];
  std::snprintf(b, sizeof b, "                    %.*s (%s)\n", static_cast<int>(test_title(o.test).size()),
                test_title(o.test).data(), r.role.c_str());
  s += b;
  std::snprintf(b, sizeof b,
                " Device         : %s\n"
                " Number of qps  : %u\t\tTransport type : Tandem RNIC (RoCEv2 RC)\n"
                " TX depth       : %u\n"
                " Mtu            : %u[B]\n"
                " Data ex. method: TCP port %u (QPN, PSN, rkey, VA, overlay GID)\n"
                " Spray / CC     : %s / %s (worker-side policies)\n"
                " Verify         : %s\n",
                o.device.c_str(), o.qps, o.tx_depth, o.mtu, o.port, policy(o.spray).c_str(),
                policy(o.cc).c_str(), o.verify ? "on" : "off");
  s += b;
  s += kRule;
  return s;
}

std::string format_results(const RunReport& r) {
  const Options& o = r.options;
  std::string s = kRule;
  char b[512];
  if (r.have_latency) {
    const LatencySummary& l = r.latency;
    s += " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
         "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]\n";
    std::snprintf(b, sizeof b, " %-6llu %-10llu     %-10.2f     %-10.2f   %-10.2f        %-10.2f     %-10.2f      %-10.2f             %-10.2f\n",
                  static_cast<unsigned long long>(o.size), static_cast<unsigned long long>(r.iterations),
                  l.t_min_us, l.t_max_us, l.t_typical_us, l.t_avg_us, l.t_stdev_us, l.t_99_us, l.t_999_us);
    s += b;
  } else if (r.have_bw) {
    s += " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n";
    std::snprintf(b, sizeof b, " %-10llu %-10llu     %-10.2f         %-10.2f           %-.6f\n",
                  static_cast<unsigned long long>(o.size), static_cast<unsigned long long>(r.iterations),
                  r.bw_peak_gbps, r.bw_avg_gbps, r.msg_rate_mpps);
    s += b;
  }
  s += " Verify         : " + r.verify + (r.peer_verify.empty() ? "" : ", server: " + r.peer_verify) + "\n";
  if (r.mismatch) s += " First mismatch : " + format_mismatch(*r.mismatch) + "\n";
  if (!r.error.empty()) s += " Error          : " + r.error + "\n";
  s += kRule;
  return s;
}

std::string format_table(const RunReport& r) { return format_header(r) + format_results(r); }

std::string format_json(const RunReport& r) {
  const Options& o = r.options;
  nlohmann::ordered_json j;
  j["test"] = std::string(test_name(o.test));
  j["role"] = r.role;
  j["size"] = o.size;
  j["iterations"] = r.iterations;
  j["messages"] = r.messages;
  j["qps"] = o.qps;
  j["tx_depth"] = o.tx_depth;
  j["mtu"] = o.mtu;
  if (o.duration_s > 0) j["duration_s"] = o.duration_s;
  if (r.have_bw) {
    j["bw_peak_gbps"] = r.bw_peak_gbps;
    j["bw_avg_gbps"] = r.bw_avg_gbps;
    j["msg_rate_mpps"] = r.msg_rate_mpps;
  }
  if (r.have_latency) {
    const LatencySummary& l = r.latency;
    j["t_min_us"] = l.t_min_us;
    j["t_typical_us"] = l.t_typical_us;
    j["t_avg_us"] = l.t_avg_us;
    j["t_stdev_us"] = l.t_stdev_us;
    j["t_99_us"] = l.t_99_us;
    j["t_999_us"] = l.t_999_us;
    j["t_max_us"] = l.t_max_us;
  }
  j["verify"] = r.verify;
  if (!r.peer_verify.empty()) j["server_verify"] = r.peer_verify;
  if (r.mismatch) {
    j["first_mismatch"] = {{"qp", r.mismatch->qp},
                           {"iteration", r.mismatch->iteration},
                           {"offset", r.mismatch->offset},
                           {"expected", r.mismatch->expected},
                           {"got", r.mismatch->got}};
  }
  j["errors"] = r.errors;
  if (!r.error.empty()) j["error"] = r.error;
  j["spray"] = o.spray;
  j["cc"] = o.cc;
  j["policies_applied_by"] = "worker";  // the host interface carries no spray/CC attribute
  return j.dump();
}

}  // namespace tandem::rnic::perf
