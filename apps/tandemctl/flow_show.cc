#include "apps/tandemctl/flow_show.h"

#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "apps/tandemctl/control_client.h"
#include "apps/tandemctl/telemetry_client.h"
#include "common/log/log.h"

namespace tandem::dpu::ctl {
namespace {

using nlohmann::json;

constexpr std::size_t kQpsPerPage = 16;  // the worker's /tandem/rnic/qps page

json agent(const FlowShowArgs& a, const json& req) {
  json r = call(a.socket, req);
  if (!r.value("ok", false)) throw Refused(r.value("error", std::string("refused")));
  return r;
}


// --fabric, or the only process on the machine that answers as a fabric.
const TelemetryEndpoint* pick_fabric(const std::vector<TelemetryEndpoint>& eps, const std::string& prefix,
                                     std::string& note) {
  std::vector<const TelemetryEndpoint*> found;
  for (const auto& e : eps) {
    if (!prefix.empty() && e.prefix != prefix) continue;
    if (telemetry_query(e, "/tandem/fabric/paths").is_object()) found.push_back(&e);
  }
  if (found.size() == 1) return found[0];
  if (found.empty())
    note = prefix.empty() ? "no tandem-fabric runs here" : "no tandem-fabric with file prefix " + prefix;
  else
    note = std::to_string(found.size()) + " tandem-fabric processes run here: pick one with --fabric PREFIX";
  return nullptr;
}

// The worker's live QPs of this flow's end, each in full (/tandem/rnic/qp).
json flow_qps(const TelemetryEndpoint& w, uint32_t vni, uint32_t vnic, const std::string& remote) {
  json out = json::array();
  for (uint32_t from = 0;;) {
    char cmd[48];
    std::snprintf(cmd, sizeof cmd, "/tandem/rnic/qps,0x%x", from);
    const json page = telemetry_query(w, cmd);
    if (!page.is_object() || page.empty()) break;
    uint32_t last = from;
    for (const auto& [k, q] : page.items()) {
      const auto qpn = static_cast<uint32_t>(std::stoul(k, nullptr, 16));
      last = std::max(last, qpn);
      if (q.value("vni", 0u) != vni || q.value("vnic", 0u) != vnic || q.value("remote", "") != remote) continue;
      json d = telemetry_query(w, "/tandem/rnic/qp," + std::to_string(qpn));
      if (d.is_object() && !d.contains("error")) out.push_back(d);
    }
    if (page.size() < kQpsPerPage) break;
    from = last + 1;
  }
  return out;
}

// Per path of every QP: which fabric path its wire source port hashes to; and
// the QPs' paths summed per fabric path (what a lossy fabric path looks like
// from this end).
json by_fabric_path(json& qps, const TelemetryEndpoint* fab, const std::string& local_underlay) {
  std::map<uint64_t, json> sum;
  for (json& q : qps) {
    for (uint32_t i = 0; i < q.value("paths", 0u); ++i) {
      const std::string key = "path" + std::to_string(i);
      if (!q.contains(key)) break;
      json& p = q[key];
      if (!fab || p.value("wire_port", 0u) == 0) continue;
      const json r = telemetry_query(*fab, "/tandem/fabric/route," + local_underlay + "," +
                                               q.value("remote_underlay", "") + "," + p["wire_port"].dump());
      if (!r.is_object() || !r.contains("path")) continue;
      p["fabric_path"] = r["path"];
      json& s = sum[r["path"].get<uint64_t>()];
      if (s.is_null()) s = {{"fabric_path", r["path"]}, {"qp_paths", 0}, {"down", 0}, {"pkts", 0}, {"acks", 0},
                            {"losses", 0}, {"removals", 0}, {"loss_removals", 0}, {"silent_removals", 0},
                            {"srtt_ns_max", 0}};
      s["qp_paths"] = s["qp_paths"].get<uint64_t>() + 1;
      s["down"] = s["down"].get<uint64_t>() + (p.value("up", 1u) ? 0 : 1);
      for (const char* f : {"pkts", "acks", "losses", "removals", "loss_removals", "silent_removals"})
        s[f] = s[f].get<uint64_t>() + p.value(f, uint64_t{0});
      s["srtt_ns_max"] = std::max(s["srtt_ns_max"].get<uint64_t>(), p.value("srtt_ns", uint64_t{0}));
    }
  }
  json a = json::array();
  for (auto& [k, s] : sum) a.push_back(s);
  return a;
}

json worker_view(const TelemetryEndpoint& w) {
  const json st = telemetry_query(w, "/tandem/rnic/stats");
  json drops = json::object();
  if (st.is_object())
    for (const auto& [k, v] : st.items())
      if (k.rfind("drop_", 0) == 0 && v.is_number() && v.get<uint64_t>() != 0) drops[k.substr(5)] = v;
  return {{"prefix", w.prefix}, {"pid", w.pid}, {"name", st.is_object() ? st.value("name", "") : ""},
          {"drops", drops}};
}

std::string us(const json& ns) { return std::to_string(ns.get<uint64_t>() / 1000); }

void print_end(const json& e, const std::string& peer) {
  const json& v = e["vnic"];
  const json& ch = e["channel"];
  std::printf("\n%s (vNIC %s) on RNIC %s -> %s: channel %s", v["overlay_ip"].get<std::string>().c_str(),
              v["id"].dump().c_str(), e["rnic"].get<std::string>().c_str(), peer.c_str(),
              ch.value("state", "").c_str());
  if (ch.contains("protocol_version"))
    std::printf(", RNIC %s, protocol v%s, worker pid %s", ch["rnic_state"].get<std::string>().c_str(),
                ch["protocol_version"].dump().c_str(), ch["rnic_pid"].dump().c_str());
  std::puts("");
  if (e.contains("table")) {
    const json& t = e["table"];
    const json& c = t["committed"];
    std::printf("  level 2: agent's shadow version %s (%s entries, digest %s); RNIC committed %s%s\n",
                t["shadow_version"].dump().c_str(), t["shadow_entries"].dump().c_str(),
                t["shadow_digest"].dump().c_str(), c.is_null() ? "-" : c["version"].dump().c_str(),
                t["in_sync"].get<bool>() ? " (in sync)" : " (NOT in sync: a transaction is pending or lost)");
  }
  std::printf("  resolve %s -> %s: %s\n", v["overlay_ip"].get<std::string>().c_str(), peer.c_str(),
              e["resolve"].get<std::string>().c_str());
  for (const json& x : e["entries"]) {
    const json& in = x["installed"].is_null() ? x["expected"] : x["installed"];
    std::string what = x["role"].get<std::string>();
    if (what == "egress")
      what += " " + in.value("dst_overlay_ip", "") + " -> underlay " + in.value("underlay_dst_ip", "") + ", " +
              in["path_count"].dump() + " paths from port " + in["path_base_port"].dump();
    else if (what == "ingress")
      what += " from " + in.value("underlay_src_ip", "") + " (" + in.value("overlay_src_ip", "") + ")";
    else
      what += " " + in.value("overlay_ip", "") + " pkey " + in.value("pkey", "");
    std::printf("    %-9s %s\n", x["status"].get<std::string>().c_str(), what.c_str());
  }
  if (e.contains("tenant_punts")) std::printf("  tenant punts on this RNIC: %s\n", e["tenant_punts"].dump().c_str());
  if (!e.contains("worker")) return;
  const json& w = e["worker"];
  if (w.contains("error")) {
    std::printf("  worker: %s\n", w["error"].get<std::string>().c_str());
    return;
  }
  std::printf("  worker %s (file prefix %s): %zu QP(s) of this flow\n", w["name"].get<std::string>().c_str(),
              w["prefix"].get<std::string>().c_str(), e["qps"].size());
  for (const json& q : e["qps"]) {
    std::printf("  QP 0x%x %s -> %s (%s): tx %s rx %s retx %s timeouts %s sacks %s reorder max %s\n",
                q["host_qpn"].get<uint32_t>(), q["state"].get<std::string>().c_str(),
                q["remote"].get<std::string>().c_str(), q["remote_underlay"].get<std::string>().c_str(),
                q["tx_pkts"].dump().c_str(), q["rx_pkts"].dump().c_str(), q["retx_pkts"].dump().c_str(),
                q["timeouts"].dump().c_str(), q["sacks_rx"].dump().c_str(), q["reorder_depth_max"].dump().c_str());
    const std::string cc = q.value("cc", "");
    if (cc == "credit")
      std::printf("    cc credit: granted %s, used %s, stalls %s\n", q["cc_credits_received"].dump().c_str(),
                  q["cc_credits_used"].dump().c_str(), q["cc_credit_stalls"].dump().c_str());
    else if (cc == "rate")
      std::printf("    cc rate: %s Mb/s, %s cuts\n", q["cc_rate_mbps"].dump().c_str(), q["cc_rate_cuts"].dump().c_str());
    else if (!cc.empty())
      std::printf("    cc: %s\n", cc.c_str());
    if (q.value("paths", 0u) <= 1) continue;
    std::printf("    path wire-port fabric  up  srtt_us     pkts     acks  losses  removed(loss/silence) excused\n");
    for (uint32_t i = 0; i < q["paths"].get<uint32_t>(); ++i) {
      const std::string key = "path" + std::to_string(i);
      if (!q.contains(key)) break;
      const json& p = q[key];
      std::printf("    %4u %9s %6s %3s %8s %8s %8s %7s %8s(%s/%s) %7s\n", i, p["wire_port"].dump().c_str(),
                  p.contains("fabric_path") ? p["fabric_path"].dump().c_str() : "-",
                  p["up"].get<int>() ? "yes" : "NO", us(p["srtt_ns"]).c_str(), p["pkts"].dump().c_str(),
                  p["acks"].dump().c_str(), p["losses"].dump().c_str(), p["removals"].dump().c_str(),
                  p["loss_removals"].dump().c_str(), p["silent_removals"].dump().c_str(),
                  p["stall_excused"].dump().c_str());
    }
  }
  if (!e["by_fabric_path"].empty()) {
    std::printf("  this end's QP paths by fabric path:\n    fabric  paths  down      pkts      acks  losses  "
                "removed(loss/silence)  srtt_us max\n");
    for (const json& s : e["by_fabric_path"])
      std::printf("    %6s %6s %5s %9s %9s %7s %8s(%s/%s) %12s\n", s["fabric_path"].dump().c_str(),
                  s["qp_paths"].dump().c_str(), s["down"].dump().c_str(), s["pkts"].dump().c_str(),
                  s["acks"].dump().c_str(), s["losses"].dump().c_str(), s["removals"].dump().c_str(),
                  s["loss_removals"].dump().c_str(), s["silent_removals"].dump().c_str(),
                  us(s["srtt_ns_max"]).c_str());
  }
  std::string drops;
  for (const auto& [k, v] : w["drops"].items()) drops += " " + k + "=" + v.dump();
  std::printf("  worker drops (all its tenants):%s\n", drops.empty() ? " none" : drops.c_str());
}

void print_flow(const json& f) {
  const json& l1 = f["level1"];
  const json& t = l1["tenant"];
  std::printf("flow %s -> %s, tenant %s (%s, partition %s, pkey %s); level 1 at store version %s\n",
              f["src"].get<std::string>().c_str(), f["dst"].get<std::string>().c_str(), t["vni"].dump().c_str(),
              t["name"].get<std::string>().c_str(), t["partition"].dump().c_str(),
              t["pkey"].get<std::string>().c_str(), l1["store_version"].dump().c_str());
  for (const json& m : l1["mappings"]) {
    if (m.value("missing", false))
      std::printf("  mapping %s: none in this tenant\n", m["overlay_ip"].get<std::string>().c_str());
    else
      std::printf("  mapping %s -> underlay %s (next hop %s) on RNIC %s\n", m["overlay_ip"].get<std::string>().c_str(),
                  m["underlay_ip"].get<std::string>().c_str(), m["next_hop_mac"].get<std::string>().c_str(),
                  m["rnic"].get<std::string>().c_str());
  }
  for (const json& e : f["ends"]) {
    const std::string me = e["vnic"]["overlay_ip"];
    print_end(e, me == f["src"] ? f["dst"].get<std::string>() : f["src"].get<std::string>());
  }
  const json& fab = f["fabric"];
  if (fab.contains("note")) {
    std::printf("\nfabric: %s\n", fab["note"].get<std::string>().c_str());
    return;
  }
  std::printf("\nfabric (file prefix %s), whole lab, not only this flow:\n", fab["prefix"].get<std::string>().c_str());
  for (const auto& [k, p] : fab["paths"].items()) {
    std::string drops;
    for (const auto& [n, v] : p.items())
      if (n.rfind("drop_", 0) == 0 && v.is_number() && v.get<uint64_t>()) drops += " " + n.substr(5) + "=" + v.dump();
    std::printf("  path %s %-4s %-28s delivered %s%s\n", k.c_str(), p.value("up", 1) ? "up" : "DOWN",
                p.value("spec", "").c_str(), p["packets"].dump().c_str(),
                drops.empty() ? "" : (", dropped:" + drops).c_str());
  }
}

}  // namespace

const TelemetryEndpoint* by_pid(const std::vector<TelemetryEndpoint>& eps, long pid) {
  for (const auto& e : eps)
    if (pid != 0 && e.pid == pid) return &e;
  return nullptr;
}

nlohmann::json collect_flow(const FlowShowArgs& a, std::vector<TelemetryEndpoint>& eps,
                            const TelemetryEndpoint** fabric) {
  eps = discover_telemetry(a.runtime_dir);
  uint32_t vni = a.vni;
  std::string src = a.src, dst = a.dst;
  if (!a.rnic.empty()) {  // by RNIC and QPN: the worker knows the QP's tenant, vNIC and peer
    const json r = agent(a, {{"cmd", "rnic.show"}, {"name", a.rnic}});
    const long pid = r["rnic"].value("channel", json::object()).value("bar", json::object()).value("rnic_pid", 0L);
    const TelemetryEndpoint* w = by_pid(eps, pid);
    if (!w)
      throw Refused("RNIC " + a.rnic + "'s worker (pid " + std::to_string(pid) + ") has no telemetry socket under " +
                    a.runtime_dir + " (not running on this machine?)");
    const json q = telemetry_query(*w, "/tandem/rnic/qp," + std::to_string(a.qpn));
    if (!q.is_object() || q.contains("error"))
      throw Refused("RNIC " + a.rnic + " has no live QP " + std::to_string(a.qpn));
    if (q.value("vni", 0u) == 0)
      throw Refused("QP " + std::to_string(a.qpn) + " on " + a.rnic + " carries no flow yet (state " +
                    q.value("state", "?") + ": it has no peer before RTR)");
    vni = q["vni"];
    dst = q["remote"];
    const json vnics = agent(a, json{{"cmd", "vnic.list"}});
    for (const json& v : vnics["vnics"])
      if (v["id"] == q["vnic"]) src = v["overlay_ip"];
    if (src.empty()) throw Refused("QP " + std::to_string(a.qpn) + "'s vNIC " + q["vnic"].dump() + " is unknown to the agent");
  }
  json flow = agent(a, {{"cmd", "flow.show"}, {"vni", vni}, {"src", src}, {"dst", dst}})["flow"];
  std::string note;
  const TelemetryEndpoint* fab = pick_fabric(eps, a.fabric, note);
  if (fabric) *fabric = fab;
  flow["fabric"] = fab ? json{{"prefix", fab->prefix}, {"paths", telemetry_query(*fab, "/tandem/fabric/paths")}}
                       : json{{"note", note}};
  std::map<std::string, std::string> underlay;
  for (const json& m : flow["level1"]["mappings"])
    if (m.contains("underlay_ip")) underlay[m["overlay_ip"]] = m["underlay_ip"];
  for (json& e : flow["ends"]) {
    const long pid = e["channel"].value("rnic_pid", 0L);
    const TelemetryEndpoint* w = by_pid(eps, pid);
    if (!w) {
      e["worker"] = {{"error", pid ? "pid " + std::to_string(pid) + " has no telemetry socket under " + a.runtime_dir
                                   : std::string("no worker has attached to the channel")}};
      continue;
    }
    const std::string me = e["vnic"]["overlay_ip"];
    const std::string peer = me == src ? dst : src;
    e["worker"] = worker_view(*w);
    e["qps"] = flow_qps(*w, vni, e["vnic"]["id"].get<uint32_t>(), peer);
    e["by_fabric_path"] = by_fabric_path(e["qps"], fab, underlay[me]);
  }
  return flow;
}

int flow_show(const FlowShowArgs& a) {
  try {
    std::vector<TelemetryEndpoint> eps;
    const json flow = collect_flow(a, eps, nullptr);
    if (a.json)
      std::cout << flow.dump(2) << "\n";
    else
      print_flow(flow);
    return 0;
  } catch (const Refused& e) {
    common::log::error("flow show: {}", e.what());
  } catch (const std::exception& e) {
    common::log::error("{}", e.what());
  }
  return 2;
}

}  // namespace tandem::dpu::ctl
