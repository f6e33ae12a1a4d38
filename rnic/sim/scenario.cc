#include "rnic/sim/scenario.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

namespace tandem::rnic::sim {

namespace {

struct Ctx {
  std::string origin;
  [[noreturn]] void fail(const std::string& what) const { throw ScenarioError(origin + ": " + what); }
};

template <class T>
T get(const Ctx& c, const YAML::Node& n, const char* key, T dflt) {
  const YAML::Node v = n[key];
  if (!v) return dflt;
  try {
    return v.as<T>();
  } catch (const YAML::Exception&) {
    c.fail(std::string("bad value for '") + key + "'");
  }
}

double get_nonneg(const Ctx& c, const YAML::Node& n, const char* key, double dflt) {
  double v = get<double>(c, n, key, dflt);
  if (v < 0) c.fail(std::string("'") + key + "' must not be negative");
  return v;
}

uint64_t us_to_ns(double us) { return static_cast<uint64_t>(us * 1000.0 + 0.5); }

void check_keys(const Ctx& c, const YAML::Node& n, const char* where,
                std::initializer_list<const char*> allowed) {
  if (!n.IsMap()) c.fail(std::string(where) + " must be a mapping");
  for (const auto& kv : n) {
    const auto k = kv.first.as<std::string>();
    bool ok = false;
    for (const char* a : allowed) ok = ok || k == a;
    if (!ok) c.fail("unknown key '" + k + "' in " + where);
  }
}

LinkParams parse_link(const Ctx& c, const YAML::Node& n, LinkParams d, const char* where) {
  if (!n) return d;
  check_keys(c, n, where, {"rate_gbps", "delay_us", "jitter_us", "loss"});
  double rate = get_nonneg(c, n, "rate_gbps", static_cast<double>(d.rate_bps) / 1e9);
  if (rate <= 0) c.fail(std::string(where) + ".rate_gbps must be positive");
  d.rate_bps = static_cast<uint64_t>(rate * 1e9);
  d.delay_ns = us_to_ns(get_nonneg(c, n, "delay_us", static_cast<double>(d.delay_ns) / 1000.0));
  d.jitter_ns = us_to_ns(get_nonneg(c, n, "jitter_us", static_cast<double>(d.jitter_ns) / 1000.0));
  d.loss = get_nonneg(c, n, "loss", d.loss);
  if (d.loss >= 1) c.fail(std::string(where) + ".loss must be below 1");
  return d;
}

TopologySpec parse_topology(const Ctx& c, const YAML::Node& n) {
  if (!n) c.fail("missing 'topology'");
  check_keys(c, n, "topology",
             {"kind", "host_link", "fabric_link", "path_rate_gbps", "paths", "queue", "hosts_per_leaf",
              "leaves", "spines", "pods", "tors_per_pod", "aggs_per_pod", "cores", "hosts_per_tor"});
  TopologySpec t;
  auto kind = get<std::string>(c, n, "kind", "");
  if (kind == "parallel") {
    t.kind = TopologySpec::Kind::kParallel;
  } else if (kind == "leaf_spine") {
    t.kind = TopologySpec::Kind::kLeafSpine;
  } else if (kind == "fat_tree") {
    t.kind = TopologySpec::Kind::kFatTree;
  } else {
    c.fail("topology.kind must be 'parallel', 'leaf_spine' or 'fat_tree', not '" + kind + "'");
  }
  t.host_link = parse_link(c, n["host_link"], t.host_link, "topology.host_link");
  t.fabric_link = parse_link(c, n["fabric_link"], t.fabric_link, "topology.fabric_link");
  if (n["path_rate_gbps"]) {
    double r = get_nonneg(c, n, "path_rate_gbps", 100);
    if (r <= 0) c.fail("topology.path_rate_gbps must be positive");
    t.fabric_link.rate_bps = static_cast<uint64_t>(r * 1e9);
  }
  if (const YAML::Node q = n["queue"]) {
    check_keys(c, q, "topology.queue", {"limit_kb", "ecn_kb", "red"});
    t.queue.limit_bytes = static_cast<uint64_t>(get_nonneg(c, q, "limit_kb", 1024) * 1024);
    t.queue.ecn_bytes = static_cast<uint64_t>(get_nonneg(c, q, "ecn_kb", 0) * 1024);
    if (const YAML::Node r = q["red"]) {
      check_keys(c, r, "topology.queue.red", {"kmin_bytes", "kmax_bytes", "pmax", "at_gbps"});
      t.queue.red_kmin_bytes = get<uint64_t>(c, r, "kmin_bytes", 0);
      t.queue.red_kmax_bytes = get<uint64_t>(c, r, "kmax_bytes", 0);
      t.queue.red_pmax = get_nonneg(c, r, "pmax", 0);
      t.queue.red_at_bps = static_cast<uint64_t>(get_nonneg(c, r, "at_gbps", 0) * 1e9);
      if (t.queue.red_kmax_bytes <= t.queue.red_kmin_bytes) c.fail("topology.queue.red: need kmin_bytes < kmax_bytes");
      if (t.queue.red_pmax > 1) c.fail("topology.queue.red.pmax must be at most 1");
    }
  }
  if (t.kind == TopologySpec::Kind::kParallel) {
    const YAML::Node paths = n["paths"];
    if (!paths || !paths.IsSequence() || paths.size() == 0) c.fail("topology.paths must be a non-empty list");
    for (const auto& p : paths) {
      check_keys(c, p, "topology.paths[]", {"delay_us", "jitter_us", "loss", "rate_gbps"});
      PathSpec ps;
      ps.delay_ns = us_to_ns(get_nonneg(c, p, "delay_us", 1));
      ps.jitter_ns = us_to_ns(get_nonneg(c, p, "jitter_us", 0));
      ps.loss = get_nonneg(c, p, "loss", 0);
      if (ps.loss >= 1) c.fail("topology.paths[].loss must be below 1");
      ps.rate_bps = static_cast<uint64_t>(get_nonneg(c, p, "rate_gbps", 0) * 1e9);
      t.paths.push_back(ps);
    }
  } else if (t.kind == TopologySpec::Kind::kFatTree) {
    t.pods = get<uint32_t>(c, n, "pods", t.pods);
    t.tors_per_pod = get<uint32_t>(c, n, "tors_per_pod", t.tors_per_pod);
    t.aggs_per_pod = get<uint32_t>(c, n, "aggs_per_pod", t.aggs_per_pod);
    t.cores = get<uint32_t>(c, n, "cores", t.cores);
    t.hosts_per_tor = get<uint32_t>(c, n, "hosts_per_tor", t.hosts_per_tor);
    if (t.pods == 0 || t.tors_per_pod == 0 || t.aggs_per_pod == 0 || t.cores == 0 || t.hosts_per_tor == 0) {
      c.fail("topology: pods, tors_per_pod, aggs_per_pod, cores and hosts_per_tor must be at least 1");
    }
    if (t.cores % t.aggs_per_pod != 0) c.fail("topology: cores must be a multiple of aggs_per_pod");
    if (uint64_t{t.pods} * t.tors_per_pod * t.hosts_per_tor > 65536) c.fail("topology: at most 65536 hosts");
  } else {
    t.hosts_per_leaf = get<uint32_t>(c, n, "hosts_per_leaf", 4);
    t.leaves = get<uint32_t>(c, n, "leaves", 2);
    t.spines = get<uint32_t>(c, n, "spines", 2);
    if (t.hosts_per_leaf == 0 || t.leaves == 0 || t.spines == 0) {
      c.fail("topology: hosts_per_leaf, leaves and spines must be at least 1");
    }
    if (t.hosts_per_leaf * t.leaves > 4096) c.fail("topology: at most 4096 hosts");
  }
  return t;
}

SizeDist parse_size(const Ctx& c, const YAML::Node& n) {
  SizeDist s;
  if (!n) return s;
  check_keys(c, n, "workload.size", {"dist", "bytes", "min_bytes", "max_bytes", "scale"});
  auto d = get<std::string>(c, n, "dist", "fixed");
  s.bytes = get<uint64_t>(c, n, "bytes", s.bytes);
  s.min_bytes = get<uint64_t>(c, n, "min_bytes", s.min_bytes);
  s.max_bytes = get<uint64_t>(c, n, "max_bytes", d == "websearch" ? 30'000'000 : d == "hadoop" ? 10'000'000 : s.max_bytes);
  s.scale = get_nonneg(c, n, "scale", 1.0);
  if (d == "fixed") {
    s.kind = SizeDist::Kind::kFixed;
    if (s.bytes == 0) c.fail("workload.size.bytes must be at least 1");
  } else if (d == "uniform") {
    s.kind = SizeDist::Kind::kUniform;
  } else if (d == "websearch" || d == "hadoop") {
    s.kind = d == "websearch" ? SizeDist::Kind::kWebSearch : SizeDist::Kind::kHadoop;
    if (s.scale <= 0) c.fail("workload.size.scale must be positive");
  } else {
    c.fail("workload.size.dist must be fixed, uniform, websearch or hadoop, not '" + d + "'");
  }
  if (s.min_bytes == 0 || s.min_bytes > s.max_bytes) c.fail("workload.size: need 1 <= min_bytes <= max_bytes");
  if (s.bytes > (1ull << 30) || s.max_bytes > (1ull << 30)) c.fail("workload.size: messages up to 1 GiB");
  return s;
}

WorkloadSpec parse_workload(const Ctx& c, const YAML::Node& n) {
  if (!n) c.fail("missing 'workload'");
  check_keys(c, n, "workload",
             {"kind", "op", "size", "messages", "outstanding", "src", "dst", "senders", "receiver",
              "start_jitter_us", "load", "duration_us", "measure_from_us", "measure_until_us", "first_host",
              "host_count", "start_us", "group", "bidirectional"});
  WorkloadSpec w;
  auto kind = get<std::string>(c, n, "kind", "");
  if (kind == "bulk") {
    w.kind = WorkloadSpec::Kind::kBulk;
  } else if (kind == "permutation") {
    w.kind = WorkloadSpec::Kind::kPermutation;
  } else if (kind == "incast") {
    w.kind = WorkloadSpec::Kind::kIncast;
  } else if (kind == "all_to_all") {
    w.kind = WorkloadSpec::Kind::kAllToAll;
  } else if (kind == "poisson") {
    w.kind = WorkloadSpec::Kind::kPoisson;
  } else if (kind == "ring") {
    w.kind = WorkloadSpec::Kind::kRing;
  } else {
    c.fail("workload.kind must be bulk, permutation, incast, all_to_all, poisson or ring, not '" + kind + "'");
  }
  auto op = get<std::string>(c, n, "op", "write");
  if (op == "write") {
    w.op = WorkloadSpec::Op::kWrite;
  } else if (op == "send") {
    w.op = WorkloadSpec::Op::kSend;
  } else if (op == "read") {
    w.op = WorkloadSpec::Op::kRead;
  } else {
    c.fail("workload.op must be write, send or read, not '" + op + "'");
  }
  w.size = parse_size(c, n["size"]);
  w.messages = get<uint32_t>(c, n, "messages", w.messages);
  w.outstanding = get<uint32_t>(c, n, "outstanding", w.outstanding);
  if (w.messages == 0 || w.outstanding == 0) c.fail("workload: messages and outstanding must be at least 1");
  w.src = get<uint32_t>(c, n, "src", w.src);
  w.dst = get<uint32_t>(c, n, "dst", w.dst);
  w.senders = get<uint32_t>(c, n, "senders", w.senders);
  w.receiver = get<uint32_t>(c, n, "receiver", w.receiver);
  w.start_jitter_ns = us_to_ns(get_nonneg(c, n, "start_jitter_us", 0));
  w.load = get_nonneg(c, n, "load", w.load);
  if (w.load <= 0 || w.load > 1) c.fail("workload.load must be in (0, 1]");
  w.duration_ns = us_to_ns(get_nonneg(c, n, "duration_us", 1000));
  if (w.kind == WorkloadSpec::Kind::kPoisson && w.duration_ns == 0) c.fail("workload.duration_us must be positive");
  w.first_host = get<uint32_t>(c, n, "first_host", 0);
  w.host_count = get<uint32_t>(c, n, "host_count", 0);
  w.start_ns = us_to_ns(get_nonneg(c, n, "start_us", 0));
  w.group = get<uint32_t>(c, n, "group", 0);
  w.measure_from_ns = us_to_ns(get_nonneg(c, n, "measure_from_us", 0));
  w.measure_until_ns = us_to_ns(get_nonneg(c, n, "measure_until_us", 0));
  if (w.measure_until_ns != 0 && w.measure_until_ns <= w.measure_from_ns)
    c.fail("workload: measure_until_us must be after measure_from_us");
  w.bidirectional = get<bool>(c, n, "bidirectional", false);
  return w;
}

std::map<std::string, std::string> parse_options(const Ctx& c, const YAML::Node& n, const char* where) {
  std::map<std::string, std::string> out;
  if (!n) return out;
  if (!n.IsMap()) c.fail(std::string(where) + " must be a mapping");
  for (const auto& kv : n) {
    if (!kv.second.IsScalar()) c.fail(std::string(where) + "." + kv.first.as<std::string>() + " must be a scalar");
    out[kv.first.as<std::string>()] = kv.second.as<std::string>();
  }
  return out;
}

HostJitterSpec parse_host_jitter(const Ctx& c, const YAML::Node& n) {
  check_keys(c, n, "hosts[]", {"host", "stall", "app_late_us", "ack_delay_us", "rx_ring"});
  HostJitterSpec h;
  const YAML::Node who = n["host"];
  if (!who) c.fail("hosts[].host is required (a host index or 'all')");
  if (who.as<std::string>() != "all") {
    const auto i = get<int64_t>(c, n, "host", -1);
    if (i < 0 || i > 65535) c.fail("hosts[].host must be a host index or 'all'");
    h.host = static_cast<int>(i);
  }
  if (const YAML::Node s = n["stall"]) {
    check_keys(c, s, "hosts[].stall", {"rate_per_ms", "dist", "mean_us", "min_us", "max_us", "alpha"});
    const auto d = get<std::string>(c, s, "dist", "exponential");
    if (d == "exponential") {
      h.stall.dist = StallSpec::Dist::kExponential;
    } else if (d == "pareto") {
      h.stall.dist = StallSpec::Dist::kPareto;
    } else {
      c.fail("hosts[].stall.dist must be exponential or pareto, not '" + d + "'");
    }
    h.stall.rate_per_ms = get_nonneg(c, s, "rate_per_ms", 0);
    h.stall.mean_ns = us_to_ns(get_nonneg(c, s, "mean_us", 100));
    h.stall.min_ns = us_to_ns(get_nonneg(c, s, "min_us", 20));
    h.stall.max_ns = us_to_ns(get_nonneg(c, s, "max_us", 3000));
    h.stall.alpha = get_nonneg(c, s, "alpha", 1.5);
    if (h.stall.alpha <= 0) c.fail("hosts[].stall.alpha must be positive");
    if (h.stall.max_ns < h.stall.min_ns) c.fail("hosts[].stall: max_us below min_us");
  }
  h.app_late_ns = us_to_ns(get_nonneg(c, n, "app_late_us", 0));
  h.ack_delay_ns = us_to_ns(get_nonneg(c, n, "ack_delay_us", 0));
  h.rx_ring = get<uint32_t>(c, n, "rx_ring", h.rx_ring);
  if (h.rx_ring == 0) c.fail("hosts[].rx_ring must be at least 1");
  return h;
}

}  // namespace

Scenario parse_scenario(const std::string& text, const std::string& origin) {
  Ctx c{origin};
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    c.fail(std::string("YAML syntax error at line ") + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (!root.IsMap()) c.fail("expected a mapping at the top level");
  try {
    check_keys(c, root, "the scenario",
               {"name", "description", "seed", "stop_us", "failover_us", "topology", "workload", "workloads",
                "failures", "transport", "policies", "hosts", "slowdown_step_pct", "dpu"});
    Scenario s;
    s.name = get<std::string>(c, root, "name", "");
    if (s.name.empty()) c.fail("missing 'name'");
    s.description = get<std::string>(c, root, "description", "");
    s.seed = get<uint64_t>(c, root, "seed", 1);
    s.stop_ns = us_to_ns(get_nonneg(c, root, "stop_us", 1'000'000));
    s.failover_ns = us_to_ns(get_nonneg(c, root, "failover_us", 0));
    s.slowdown_step_pct = get<uint32_t>(c, root, "slowdown_step_pct", 0);
    if (s.slowdown_step_pct > 100 || (s.slowdown_step_pct != 0 && 100 % s.slowdown_step_pct != 0))
      c.fail("slowdown_step_pct must divide 100");
    s.topology = parse_topology(c, root["topology"]);
    if (root["workload"] && root["workloads"]) c.fail("give either 'workload' or 'workloads', not both");
    if (const YAML::Node ws = root["workloads"]) {
      if (!ws.IsSequence() || ws.size() == 0) c.fail("workloads must be a non-empty list");
      for (const auto& w : ws) s.more_workloads.push_back(parse_workload(c, w));
      s.workload = s.more_workloads.front();
      s.more_workloads.erase(s.more_workloads.begin());
      for (const WorkloadSpec& w : s.more_workloads) {
        if (w.op != s.workload.op) c.fail("workloads: every workload must have the same op");
        if (w.windowed()) c.fail("workloads: only the first may have a measurement window");
      }
    } else {
      s.workload = parse_workload(c, root["workload"]);
    }
    if (const YAML::Node d = root["dpu"]) {
      if (!d.IsMap()) c.fail("dpu must be a mapping");
      YAML::Emitter e;
      e << d;
      s.dpu_yaml = e.c_str();
    }
    s.transport = parse_options(c, root["transport"], "transport");
    if (const YAML::Node f = root["failures"]) {
      if (!f.IsSequence()) c.fail("failures must be a list");
      for (const auto& e : f) {
        check_keys(c, e, "failures[]", {"at_us", "link", "state", "direction"});
        FailureSpec fs;
        fs.at_ns = us_to_ns(get_nonneg(c, e, "at_us", 0));
        fs.link = get<std::string>(c, e, "link", "");
        auto st = get<std::string>(c, e, "state", "");
        if (st != "down" && st != "up") c.fail("failures[].state must be down or up");
        fs.up = st == "up";
        const auto dir = get<std::string>(c, e, "direction", "both");
        if (dir != "both" && dir != "forward" && dir != "reverse")
          c.fail("failures[].direction must be both, forward or reverse");
        fs.direction = dir == "both" ? -1 : dir == "forward" ? 0 : 1;
        if (fs.link.empty()) c.fail("failures[].link is required");
        s.failures.push_back(fs);
      }
    }
    if (const YAML::Node h = root["hosts"]) {
      if (!h.IsSequence()) c.fail("hosts must be a list");
      for (const auto& e : h) s.hosts.push_back(parse_host_jitter(c, e));
    }
    const YAML::Node pol = root["policies"];
    if (!pol || !pol.IsSequence() || pol.size() == 0) c.fail("policies must be a non-empty list");
    for (const auto& p : pol) {
      if (!p.IsMap()) c.fail("policies[] entries must be mappings");
      PolicySpec ps;
      ps.options = parse_options(c, p, "policies[]");
      auto it = ps.options.find("name");
      if (it == ps.options.end() || it->second.empty()) c.fail("policies[] entry without a name");
      ps.name = it->second;
      ps.options.erase(it);
      s.policies.push_back(std::move(ps));
    }
    return s;
  } catch (const YAML::Exception& e) {
    c.fail(std::string("bad scenario at line ") + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
}

Scenario load_scenario_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ScenarioError(path + ": cannot open scenario file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_scenario(ss.str(), path);
}

}  // namespace tandem::rnic::sim
