#include "apps/tandemctl/trace_cmd.h"

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "apps/tandemctl/control_client.h"
#include "common/fabric/path_model.h"
#include "common/log/log.h"
#include "common/trace/trace_file.h"
#include "common/trace/trace_merge.h"
#include "common/trace/trace_rule.h"
#include "common/wire/drop_reason.h"
#include "common/wire/ipv4_text.h"
#include "common/wire/opcode.h"

namespace tandem::dpu::ctl {
namespace {

using nlohmann::json;
namespace tr = common::trace;

std::string session_path(const TraceArgs& a) { return a.flow.socket + ".trace"; }

std::string verdict_name(tr::Stage s, uint8_t v) {
  if (v == 0) return "ok";
  if (tr::is_setup_stage(s)) return std::string(tr::setup_verdict_name(v));
  if (s == tr::Stage::kFabricDrop) return std::string(common::path_drop_name(static_cast<common::PathDrop>(v)));
  return std::string(common::drop_reason_name(static_cast<common::DropReason>(v)));
}

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%x", v);
  return b;
}

std::string opcode_name(uint8_t op) {
  const std::string_view n = common::opcode_info(op).name;
  return n.empty() ? "op" + std::to_string(op) : std::string(n);
}

// Sends `cmd,<rule>` to one process; its reply, or an error object.
json arm(const TelemetryEndpoint& e, const std::string& cmd, const std::string& rule) {
  json r = telemetry_query(e, cmd + "," + rule);
  if (!r.is_object()) return {{"error", "no answer to " + cmd + " (an older build without tracing?)"}};
  return r;
}

// The agent takes rules over its control socket (`trace` command): its reply, or an error object.
json arm_agent(const TraceArgs& a, const std::string& rule) {
  try {
    json r = call(a.flow.socket, {{"cmd", "trace"}, {"rule", rule}});
    if (!r.value("ok", false)) return {{"error", r.value("error", std::string("refused"))}};
    return r.value("trace", json::object());
  } catch (const std::exception& e) {
    return {{"error", e.what()}};
  }
}

// The session file: which processes were armed, with which rule.
json read_session(const TraceArgs& a) {
  std::ifstream in(session_path(a));
  if (!in) return nullptr;
  return json::parse(in, nullptr, false);
}

}  // namespace

int trace_start(const TraceArgs& a) {
  try {
    std::vector<TelemetryEndpoint> eps;
    const TelemetryEndpoint* fab = nullptr;
    const json flow = collect_flow(a.flow, eps, &fab);
    std::string ua, ub;
    for (const json& m : flow["level1"]["mappings"]) {
      if (!m.contains("underlay_ip")) continue;
      (m["overlay_ip"] == flow["src"] ? ua : ub) = m["underlay_ip"];
    }
    if (ua.empty() || ub.empty()) throw Refused("the flow's two underlay addresses are not both mapped");
    tr::Rule rule;
    rule.ip_a = common::parse_ipv4(ua);
    rule.ip_b = common::parse_ipv4(ub);
    // The wire names a QP's packets by the QP they go to: both ends' QPs and their peers.
    std::set<uint32_t> qpns;
    for (const json& e : flow["ends"])
      for (const json& q : e.value("qps", json::array())) {
        const bool src_end = e["vnic"]["overlay_ip"] == flow["src"];
        if (a.qpn != 0 && !(src_end && q["host_qpn"] == a.qpn) && !(!src_end && q.value("dest_qpn", 0u) == a.qpn))
          continue;
        qpns.insert(q["host_qpn"].get<uint32_t>());
        if (q.value("dest_qpn", 0u)) qpns.insert(q["dest_qpn"].get<uint32_t>());
      }
    if (a.qpn != 0 && qpns.empty()) throw Refused("no QP " + std::to_string(a.qpn) + " carries this flow on its source end");
    if (qpns.size() > tr::Rule::kMaxQpns)
      throw Refused("the flow has " + std::to_string(qpns.size()) + " QPs on the wire; a rule names at most " +
                    std::to_string(tr::Rule::kMaxQpns) + ": pick one with --qpn");
    for (uint32_t q : qpns) rule.qpns[rule.n_qpns++] = q;
    if (qpns.empty()) {  // no QP yet: the tenant's packets between the two RNICs (its partition)
      const std::string pk = flow["level1"]["tenant"].value("pkey", "0xffff");
      rule.pkey = static_cast<uint16_t>(std::stoul(pk, nullptr, 16));
    }
    rule.count = a.count;
    rule.ms = a.count && a.seconds == 0 ? 0 : static_cast<uint64_t>((a.seconds > 0 ? a.seconds : 10) * 1000);
    const std::string text = tr::format_rule(rule);
    json session = {{"rule", text}, {"runtime_dir", a.flow.runtime_dir}, {"flow", {{"vni", flow["vni"]},
                    {"src", flow["src"]}, {"dst", flow["dst"]}}}, {"processes", json::array()}};
    bool ok = true;
    auto add = [&](const TelemetryEndpoint& e, const char* cmd, const std::string& what) {
      json r = arm(e, cmd, text);
      ok &= !r.contains("error");
      session["processes"].push_back({{"prefix", e.prefix}, {"what", what}, {"reply", r}});
      std::printf("%-28s %-18s %s\n", what.c_str(), e.prefix.c_str(),
                  r.contains("error") ? ("REFUSED: " + r["error"].get<std::string>()).c_str()
                                      : ("armed, ring " + std::to_string(r.value("ring_bytes", 0) / 1024) + " KiB").c_str());
    };
    for (const json& e : flow["ends"])
      if (const TelemetryEndpoint* w = by_pid(eps, e["channel"].value("rnic_pid", 0L)))
        add(*w, "/tandem/rnic/trace", "tandem-rnic " + e["rnic"].get<std::string>());
    if (fab) add(*fab, "/tandem/fabric/trace", "tandem-fabric");
    {  // the agent: punts it resolves and the transactions it commits (set-up records)
      const json r = arm_agent(a, text);
      ok &= !r.contains("error");
      const std::filesystem::path ring = r.value("ring", std::string());
      const std::string prefix = ring.parent_path().filename();
      session["processes"].push_back(
          {{"prefix", prefix}, {"what", "tandem-dpu"}, {"via", "control"}, {"ring", ring.string()}, {"reply", r}});
      std::printf("%-28s %-18s %s\n", "tandem-dpu", prefix.c_str(),
                  r.contains("error") ? ("REFUSED: " + r["error"].get<std::string>()).c_str()
                                      : ("armed, ring " + std::to_string(r.value("ring_bytes", 0) / 1024) + " KiB").c_str());
    }
    std::ofstream(session_path(a)) << session.dump(2) << "\n";
    std::printf("rule %s\n", text.c_str());
    if (qpns.empty()) std::printf("(no QP carries the flow yet: every packet of the tenant between the two RNICs)\n");
    return ok ? 0 : 2;
  } catch (const Refused& e) {
    common::log::error("trace start: {}", e.what());
  } catch (const std::exception& e) {
    common::log::error("{}", e.what());
  }
  return 2;
}

int trace_stop(const TraceArgs& a) {
  const json s = read_session(a);
  if (!s.is_object()) {
    common::log::error("trace stop: no trace session ({})", session_path(a));
    return 2;
  }
  const std::vector<TelemetryEndpoint> eps = discover_telemetry(s.value("runtime_dir", a.flow.runtime_dir));
  for (const json& p : s["processes"]) {
    if (p.value("via", "") == "control") {
      const json r = arm_agent(a, "off");
      if (r.contains("error")) common::log::error("trace stop: the agent: {}", r["error"].get<std::string>());
      continue;
    }
    for (const auto& e : eps)
      if (e.prefix == p["prefix"])
        arm(e, p["what"].get<std::string>().rfind("tandem-fabric", 0) == 0 ? "/tandem/fabric/trace" : "/tandem/rnic/trace",
            "off");
  }
  std::puts("stopped (the records stay in the rings until overwritten)");
  return 0;
}

int trace_show(const TraceArgs& a) {
  const json s = read_session(a);
  const std::string dir = s.is_object() ? s.value("runtime_dir", a.flow.runtime_dir) : a.flow.runtime_dir;
  std::vector<std::pair<std::string, std::string>> prefixes;  // (prefix, ring file)
  for (const std::string& p : a.prefixes) prefixes.push_back({p, dir + "/" + p + "/" + tr::kRingFileName});
  if (prefixes.empty() && s.is_object())
    for (const json& p : s["processes"]) {  // the agent names its ring (its runtime dir may be elsewhere)
      const std::string ring = p.value("ring", std::string());
      prefixes.push_back({p["prefix"], ring.empty() ? dir + "/" + p["prefix"].get<std::string>() + "/" + tr::kRingFileName : ring});
    }
  if (prefixes.empty()) {
    common::log::error("trace show: no trace session ({}) and no --prefix", session_path(a));
    return 2;
  }
  std::vector<tr::RingDump> rings;
  json sources = json::array();
  for (const auto& [p, first] : prefixes)
    for (const std::string& path : tr::process_rings(first)) {  // a worker with several lcores: one ring each
      try {
        tr::RingFile f = tr::RingFile::open(path);
        tr::RingDump d{f.header()->process, f.header()->clock_offset_ns, tr::ring_read(f.header()),
                       f.header()->tsc_base, f.header()->tsc_mult};
        sources.push_back({{"prefix", p}, {"process", d.process}, {"ring", path}, {"records", d.records.size()},
                           {"written", f.header()->head.load()}});
        rings.push_back(std::move(d));
      } catch (const std::exception& e) {
        sources.push_back({{"prefix", p}, {"ring", path}, {"error", e.what()}});
      }
    }
  const tr::TscCalibration cal = tr::calibrate_tsc();
  tr::Merged m = tr::merge(rings, verdict_name, &cal);
  auto pkt_json = [&](const tr::Timeline& t) {
    json ev = json::array();
    for (const tr::Event& e : t.events) {
      ev.push_back({{"t_ns", e.t_ns}, {"process", e.process}, {"stage", tr::stage_name(e.r.stage)},
                    {"verdict", verdict_name(e.r.stage, e.r.verdict)}, {"sport", e.r.sport}, {"aux", e.r.aux},
                    {"copy", e.copy}, {"retransmit", (e.r.flags & tr::kFlagRetransmit) != 0}});
      if (e.r.stage == tr::Stage::kRxIngress || e.r.stage == tr::Stage::kRxCore) ev.back()["table_version"] = e.r.aux;
    }
    json j = {{"src", common::format_ipv4(t.key.src_ip)}, {"dst", common::format_ipv4(t.key.dst_ip)}, {"dqpn", t.key.dqpn}, {"psn", t.key.psn},
              {"opcode", opcode_name(t.key.opcode)}, {"outcome", tr::outcome_name(t.outcome)}, {"copies", t.copies},
              {"drops", t.drops}, {"foreign", t.foreign}, {"out_of_order", t.out_of_order}, {"events", ev}};
    if (t.drop >= 0)
      j["dropped_at"] = {{"stage", tr::stage_name(t.events[t.drop].r.stage)},
                         {"reason", verdict_name(t.events[t.drop].r.stage, t.events[t.drop].r.verdict)},
                         {"process", t.events[t.drop].process}};
    return j;
  };
  // What an operator wants to see first (lower first); packets at the
  // window's edge and plain deliveries only with --all.
  auto rank = [](const tr::Timeline& t) {
    if (t.foreign) return 0;
    if (t.outcome == tr::Outcome::kDropped) return 1;
    if (t.outcome == tr::Outcome::kInFlight || t.outcome == tr::Outcome::kUnknown) return 2;
    if (t.drops > 0 || t.copies > 1) return 3;
    if (t.outcome == tr::Outcome::kDuplicate) return 4;
    return t.outcome == tr::Outcome::kEdge ? 6 : 5;
  };
  auto eventful = [&](const tr::Timeline& t) { return rank(t) <= 4; };
  json hops = json::object();
  for (auto& [k, v] : m.hops) hops[k] = {{"n", v.size()}, {"p50_ns", tr::percentile(v, 50)}, {"p99_ns", tr::percentile(v, 99)}};
  json setup_hops = json::object();
  for (auto& [k, v] : m.setup_hops)
    setup_hops[k] = {{"n", v.size()}, {"p50_ns", tr::percentile(v, 50)}, {"p99_ns", tr::percentile(v, 99)}};
  // A flow's set-up (a punted miss, its resolution and commit, then the
  // first packet between the two RNICs): set-up records, then that packet's.
  auto setup_json = [&](const tr::Setup& su) {
    json ev = json::array();
    for (std::size_t i = 0; i < su.events.size(); ++i) {
      const tr::Event& e = su.events[i];
      ev.push_back({{"t_ns", e.t_ns}, {"process", e.process}, {"stage", tr::stage_name(e.r.stage)},
                    {"verdict", verdict_name(e.r.stage, e.r.verdict)}});
      if (e.r.stage == tr::Stage::kTxnCommit) ev.back()["table_version"] = e.r.aux;
      if (static_cast<int>(i) > su.last_setup) ev.back().update({{"psn", e.r.psn}, {"dqpn", e.r.dqpn}, {"copy", e.copy}});
    }
    json j = {{"src", common::format_ipv4(su.src_ip)}, {"dst", su.dst_ip ? json(common::format_ipv4(su.dst_ip)) : json(nullptr)},
              {"vnic", su.vnic}, {"overlay", common::format_ipv4(su.overlay)},
              {"outcome", tr::setup_outcome_name(su.outcome)}, {"table_version", su.version}, {"events", ev}};
    if (su.first_packet >= 0) {
      const tr::Timeline& t = m.packets[static_cast<std::size_t>(su.first_packet)];
      j["first_packet"] = {{"dqpn", t.key.dqpn}, {"psn", t.key.psn}, {"opcode", opcode_name(t.key.opcode)},
                           {"outcome", tr::outcome_name(t.outcome)}, {"after_punt_ns", su.end_ns - su.first_ns}};
    }
    return j;
  };
  if (a.flow.json) {
    json su = json::array();
    for (const tr::Setup& x : m.setups) su.push_back(setup_json(x));
    json pk = json::array();
    for (const tr::Timeline& t : m.packets)
      if (a.all || eventful(t)) pk.push_back(pkt_json(t));
    std::cout << json{{"sources", sources}, {"records", m.records}, {"packets", m.packets.size()},
                      {"window_ns", {m.window_start_ns, m.window_end_ns}},
                      {"outcomes", m.outcomes}, {"drops_at", m.drops_at}, {"hops", hops}, {"timelines", pk},
                      {"setups", su}, {"setup_outcomes", m.setup_outcomes}, {"setup_hops", setup_hops}}
                     .dump(2)
              << "\n";
    return 0;
  }
  for (const json& x : sources) {
    const std::string ring = std::filesystem::path(x["ring"].get<std::string>()).filename();
    const std::string which = ring == tr::kRingFileName ? "" : " (" + ring + ")";  // another lcore's ring
    std::printf("%-22s %s\n", x["prefix"].get<std::string>().c_str(),
                x.contains("error") ? x["error"].get<std::string>().c_str()
                                    : (x["process"].get<std::string>() + which + ": " + x["records"].dump() + " records").c_str());
  }
  std::printf("%zu packets from %lu records in a %.1f ms window:", m.packets.size(), static_cast<unsigned long>(m.records),
              (m.window_end_ns - m.window_start_ns) / 1e6);
  for (const auto& [k, v] : m.outcomes) std::printf(" %s %lu", k.c_str(), static_cast<unsigned long>(v));
  std::puts("");
  for (const auto& [k, v] : m.drops_at) std::printf("  dropped at %s: %lu\n", k.c_str(), static_cast<unsigned long>(v));
  for (const auto& [k, h] : hops.items())
    std::printf("  %-32s p50 %6.1f us  p99 %7.1f us  (%s delivered copies)\n", k.c_str(),
                h["p50_ns"].get<uint64_t>() / 1e3, h["p99_ns"].get<uint64_t>() / 1e3, h["n"].dump().c_str());
  if (!m.setups.empty()) {
    std::printf("%zu flow set-up(s):", m.setups.size());
    for (const auto& [k, v] : m.setup_outcomes) std::printf(" %s %lu", k.c_str(), static_cast<unsigned long>(v));
    std::puts("");
    for (const auto& [k, h] : setup_hops.items())
      std::printf("  %-32s p50 %6.1f us  p99 %7.1f us  (%s set-ups)\n", k.c_str(), h["p50_ns"].get<uint64_t>() / 1e3,
                  h["p99_ns"].get<uint64_t>() / 1e3, h["n"].dump().c_str());
  }
  std::size_t shown_setups = 0;
  for (const tr::Setup& su : m.setups) {
    if (shown_setups++ == a.limit) {
      std::printf("... (--limit N for more set-ups)\n");
      break;
    }
    std::string end = tr::setup_outcome_name(su.outcome);
    if (su.version) end += ", table v" + std::to_string(su.version);
    if (su.first_packet >= 0)
      end += ", first packet " + std::string(tr::outcome_name(m.packets[static_cast<std::size_t>(su.first_packet)].outcome)) +
             " " + std::to_string((su.end_ns - su.first_ns) / 1000) + " us after the first set-up record";
    std::printf("\nset-up of %s vNIC %u -> %s (%s): %s\n", common::format_ipv4(su.src_ip).c_str(), su.vnic,
                common::format_ipv4(su.overlay).c_str(),
                su.dst_ip ? ("at " + common::format_ipv4(su.dst_ip)).c_str() : "not resolved", end.c_str());
    for (std::size_t i = 0; i < su.events.size(); ++i) {
      const tr::Event& e = su.events[i];
      std::string what = verdict_name(e.r.stage, e.r.verdict);
      if (e.r.stage == tr::Stage::kTxnCommit) what += " v" + std::to_string(e.r.aux);
      if (e.r.stage == tr::Stage::kAgentResolve && e.r.dst_ip) what += " -> " + common::format_ipv4(e.r.dst_ip);
      if (static_cast<int>(i) > su.last_setup)  // the first packet's records
        what = "QP " + hex(e.r.dqpn) + " PSN " + std::to_string(e.r.psn) + " " + what;
      std::printf("  %+10.1f us  %-22s %-16s %s\n", (e.t_ns - su.first_ns) / 1e3, e.process.c_str(),
                  std::string(tr::stage_name(e.r.stage)).c_str(), what.c_str());
    }
  }
  std::vector<const tr::Timeline*> order;
  for (const tr::Timeline& t : m.packets)
    if (a.all || eventful(t)) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [&](auto* x, auto* y) { return rank(*x) < rank(*y); });
  std::size_t shown = 0;
  for (const tr::Timeline* tp : order) {
    const tr::Timeline& t = *tp;
    if (shown++ == a.limit) {
      std::printf("... (--all or --limit N for more)\n");
      break;
    }
    std::string end = tr::outcome_name(t.outcome);
    if (t.drop >= 0)
      end += " at " + std::string(tr::stage_name(t.events[t.drop].r.stage)) + " (" +
             verdict_name(t.events[t.drop].r.stage, t.events[t.drop].r.verdict) + ", " + t.events[t.drop].process + ")";
    if (t.copies > 1) end += ", " + std::to_string(t.copies - 1) + " retransmission(s)";
    if (t.foreign) end += ", not sent by a traced QP";
    if (t.out_of_order) end += ", out of order";
    std::printf("\n%s -> %s QP 0x%x PSN %u %s: %s\n", common::format_ipv4(t.key.src_ip).c_str(), common::format_ipv4(t.key.dst_ip).c_str(),
                t.key.dqpn, t.key.psn, opcode_name(t.key.opcode).c_str(), end.c_str());
    const uint64_t t0 = t.events.empty() ? 0 : t.events.front().t_ns;
    for (const tr::Event& e : t.events) {
      std::string where = std::string(tr::stage_name(e.r.stage));
      if (e.r.stage == tr::Stage::kFabricEnqueue || e.r.stage == tr::Stage::kFabricDrop ||
          e.r.stage == tr::Stage::kFabricDeliver)
        where += " path " + std::to_string(e.r.aux);
      std::printf("  %+10.1f us  copy %u  %-22s %-26s sport %-5u %s%s\n", (e.t_ns - t0) / 1e3, e.copy,
                  e.process.c_str(), where.c_str(), e.r.sport, verdict_name(e.r.stage, e.r.verdict).c_str(),
                  e.r.flags & tr::kFlagRetransmit ? " (retransmission)" : "");
    }
  }
  return 0;
}

}  // namespace tandem::dpu::ctl
