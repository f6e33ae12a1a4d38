#include "sim/dpu_spec.h"

#include <yaml-cpp/yaml.h>

#include "rnic/sim/scenario.h"

namespace tandem::sim {

namespace {

using rnic::sim::ScenarioError;

struct Reader {
  std::string origin;
  [[noreturn]] void fail(const std::string& what) const { throw ScenarioError(origin + ": dpu." + what); }
  template <class T>
  T get(const YAML::Node& n, const char* key, T dflt) const {
    const YAML::Node v = n[key];
    if (!v) return dflt;
    try {
      return v.as<T>();
    } catch (const YAML::Exception&) {
      fail(std::string(key) + ": bad value");
    }
  }
  uint64_t us(const YAML::Node& n, const char* key, uint64_t dflt_ns) const {
    const double v = get<double>(n, key, static_cast<double>(dflt_ns) / 1000.0);
    if (v < 0) fail(std::string(key) + " must not be negative");
    return static_cast<uint64_t>(v * 1000.0 + 0.5);
  }
  void keys(const YAML::Node& n, std::initializer_list<const char*> allowed, const char* where) const {
    if (!n.IsMap()) fail(std::string(where) + " must be a mapping");
    for (const auto& kv : n) {
      const auto k = kv.first.as<std::string>();
      bool ok = false;
      for (const char* a : allowed) ok = ok || k == a;
      if (!ok) fail("unknown key '" + k + "' in " + where);
    }
  }
};

}  // namespace

DpuSpec parse_dpu_spec(const std::string& yaml, const std::string& origin) {
  Reader r{origin};
  DpuSpec s;
  YAML::Node n;
  try {
    n = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    r.fail(std::string("YAML: ") + e.msg);
  }
  try {
    r.keys(n,
           {"rnics_per_server", "table_capacity", "channel", "resolve_us", "event_us", "command_us", "punts_per_round",
            "tenant_flow_quota", "punt_queue_limit", "tick_us", "heartbeat_interval_us", "heartbeat_timeout_us",
            "agent_timeout_us", "txn_timeout_us", "repunt_us", "restarts", "storms"},
           "dpu");
    s.rnics_per_server = r.get<uint32_t>(n, "rnics_per_server", s.rnics_per_server);
    if (s.rnics_per_server == 0 || s.rnics_per_server > 64) r.fail("rnics_per_server must be 1..64");
    s.table_capacity = r.get<uint32_t>(n, "table_capacity", s.table_capacity);
    if (s.table_capacity < 8) r.fail("table_capacity must be at least 8");
    if (const YAML::Node c = n["channel"]) {
      r.keys(c, {"latency_us", "gbps"}, "channel");
      s.channel_latency_ns = r.us(c, "latency_us", s.channel_latency_ns);
      s.channel_gbps = r.get<double>(c, "gbps", s.channel_gbps);
      if (s.channel_gbps < 0) r.fail("channel.gbps must not be negative");
    }
    s.resolve_ns = r.us(n, "resolve_us", s.resolve_ns);
    s.event_ns = r.us(n, "event_us", s.event_ns);
    s.command_ns = r.us(n, "command_us", s.command_ns);
    s.punts_per_round = r.get<uint32_t>(n, "punts_per_round", s.punts_per_round);
    if (s.punts_per_round == 0) r.fail("punts_per_round must be at least 1");
    s.tenant_flow_quota = r.get<uint32_t>(n, "tenant_flow_quota", s.tenant_flow_quota);
    s.punt_queue_limit = r.get<uint32_t>(n, "punt_queue_limit", s.punt_queue_limit);
    if (s.punt_queue_limit == 0) r.fail("punt_queue_limit must be at least 1");
    s.tick_ns = r.us(n, "tick_us", s.tick_ns);
    if (s.tick_ns == 0) r.fail("tick_us must be positive");
    s.heartbeat_interval_ns = r.us(n, "heartbeat_interval_us", s.heartbeat_interval_ns);
    s.heartbeat_timeout_ns = r.us(n, "heartbeat_timeout_us", s.heartbeat_timeout_ns);
    s.agent_timeout_ns = r.us(n, "agent_timeout_us", s.agent_timeout_ns);
    s.txn_timeout_ns = r.us(n, "txn_timeout_us", s.txn_timeout_ns);
    s.repunt_ns = r.us(n, "repunt_us", s.repunt_ns);
    if (const YAML::Node rs = n["restarts"]) {
      if (!rs.IsSequence()) r.fail("restarts must be a list");
      for (const auto& e : rs) {
        r.keys(e, {"server", "at_us", "down_us", "store"}, "restarts[]");
        DpuSpec::Restart x;
        x.server = r.get<uint32_t>(e, "server", 0);
        x.at_ns = r.us(e, "at_us", 0);
        x.down_ns = r.us(e, "down_us", 0);
        const std::string store = r.get<std::string>(e, "store", "kept");
        if (store != "kept" && store != "lost") r.fail("restarts[].store must be kept or lost");
        x.store_lost = store == "lost";
        s.restarts.push_back(x);
      }
    }
    if (const YAML::Node sts = n["storms"]) {
      if (!sts.IsSequence()) r.fail("storms must be a list");
      if (sts.size() > 64) r.fail("storms: at most 64");
      for (const auto& st : sts) {
        r.keys(st, {"rnic", "from", "victim_group", "at_us", "interval_us", "flows", "aim"}, "storms[]");
        DpuSpec::Storm x;
        x.rnic = r.get<uint32_t>(st, "rnic", x.rnic);
        x.from = r.get<uint32_t>(st, "from", x.from);
        if (x.from == x.rnic) r.fail("storms[].from must be another RNIC than rnic");
        x.victim_group = r.get<uint32_t>(st, "victim_group", x.victim_group);
        x.at_ns = r.us(st, "at_us", x.at_ns);
        x.interval_ns = r.us(st, "interval_us", x.interval_ns);
        x.flows = r.get<uint32_t>(st, "flows", x.flows);
        if (x.flows > (1u << 20)) r.fail("storms[].flows must be at most 1048576");
        const std::string aim = r.get<std::string>(st, "aim", "secret");
        if (aim == "secret") {
          x.aim = DpuSpec::Storm::Aim::kSecret;
        } else if (aim == "unkeyed") {
          x.aim = DpuSpec::Storm::Aim::kUnkeyed;
        } else if (aim == "none") {
          x.aim = DpuSpec::Storm::Aim::kNone;
        } else {
          r.fail("storms[].aim must be secret, unkeyed or none");
        }
        s.storms.push_back(x);
      }
    }
  } catch (const YAML::Exception& e) {
    r.fail(std::string("bad value: ") + e.msg);
  }
  return s;
}

const char* aim_name(DpuSpec::Storm::Aim a) noexcept {
  switch (a) {
    case DpuSpec::Storm::Aim::kSecret: return "secret";
    case DpuSpec::Storm::Aim::kUnkeyed: return "unkeyed";
    case DpuSpec::Storm::Aim::kNone: return "none";
  }
  return "?";
}

}  // namespace tandem::sim
