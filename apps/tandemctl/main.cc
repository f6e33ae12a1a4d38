// tandemctl: the operator's command line for tandem-dpu. Each command becomes
// one JSON request on the agent's control socket; the reply is printed as a
// table (or raw with --json). A refused request prints the agent's one-line
// reason and exits 2; the agent has changed nothing.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/tandemctl/control_client.h"
#include "apps/tandemctl/fleet_cli.h"
#include "apps/tandemctl/flow_show.h"
#include "apps/tandemctl/trace_cmd.h"
#include "common/log/log_cli.h"

using nlohmann::json;

namespace {

std::string cell(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string s;
    for (const json& x : v) s += (s.empty() ? "" : ",") + cell(x);
    return s.empty() ? "-" : s;
  }
  return v.dump();
}

// Rows of objects as aligned columns (nested objects left out: use --json).
void print_table(const json& rows) {
  if (rows.empty()) {
    std::puts("(none)");
    return;
  }
  std::vector<std::string> cols;
  for (const auto& [k, v] : rows[0].items())
    if (!v.is_object()) cols.push_back(k);
  std::vector<std::size_t> w(cols.size());
  for (std::size_t i = 0; i < cols.size(); ++i) w[i] = cols[i].size();
  for (const json& r : rows)
    for (std::size_t i = 0; i < cols.size(); ++i) w[i] = std::max(w[i], cell(r.value(cols[i], json(""))).size());
  for (std::size_t i = 0; i < cols.size(); ++i) std::printf("%-*s  ", static_cast<int>(w[i]), cols[i].c_str());
  std::puts("");
  for (const json& r : rows) {
    for (std::size_t i = 0; i < cols.size(); ++i)
      std::printf("%-*s  ", static_cast<int>(w[i]), cell(r.value(cols[i], json(""))).c_str());
    std::puts("");
  }
}

void print_kv(const json& o, const std::string& prefix = "") {
  for (const auto& [k, v] : o.items()) {
    if (v.is_object()) {
      print_kv(v, prefix + k + ".");
    } else {
      std::printf("%-36s %s\n", (prefix + k).c_str(), cell(v).c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  tandem::common::log::init("tandemctl");
  CLI::App app{
      "tandemctl: configure and inspect a running tandem-dpu over its control socket.\n"
      "Addresses are dotted IPv4 and colon MACs; VNIs are 1..16777215. Every command takes --json.\n"
      "Exit status: 0 done, 2 refused (the agent's reason is printed; nothing was changed) or unreachable."};
  app.set_help_flag("-h,--help", "Show this help and exit");
  app.require_subcommand(1);
  app.fallthrough();
  std::string socket = std::getenv("TANDEM_DPU_SOCKET") ? std::getenv("TANDEM_DPU_SOCKET") : "/run/tandem/dpu.sock";
  bool as_json = false;
  app.add_option("--socket", socket, "tandem-dpu control socket (default $TANDEM_DPU_SOCKET or /run/tandem/dpu.sock)");
  app.add_flag("--json", as_json, "Print the agent's JSON reply as it is");
  std::string log_level = "info";
  tandem::common::log::add_level_option(app, log_level);

  json req;
  std::string list_key;   // reply array to print as a table
  std::string show_key;   // reply object to print as key/value lines

  auto group = [&](const char* name, const char* help) {
    CLI::App* g = app.add_subcommand(name, help);
    g->require_subcommand(1);
    g->fallthrough();
    return g;
  };
  auto leaf = [&](CLI::App* g, const char* name, const char* help, const char* cmd) {
    CLI::App* s = g->add_subcommand(name, help);
    s->fallthrough();
    s->preparse_callback([&req, cmd](std::size_t) { req["cmd"] = cmd; });
    return s;
  };

  // Values parsed into these, then moved into the request by each callback.
  static uint64_t vni = 0, id = 0, qpn = 0, level = 2, limit = 0, port = 0, paths = 1, peer = 0;
  static std::string name, ip, mac, rnic, uip, format, file;
  static bool replace = false, reset = false;

  CLI::App* tenant = group("tenant", "Tenants (VNIs)");
  CLI::App* s = leaf(tenant, "add", "Add a tenant", "tenant.add");
  s->add_option("vni", vni, "VNI")->required();
  s->add_option("name", name, "Name")->required();
  CLI::Option* part = s->add_option("--partition", paths,
                "Partition 1..32766: its RNICs stamp P_Key 0x8000|N on the tenant's packets and drop\n"
                "packets of other partitions (docs/partitions.md). Default: the lowest free one");
  CLI::Option* share = s->add_option("--share-partition-with", peer,
                                     "Give it tenant VNI's partition: the two tenants' QPs may then reach\n"
                                     "each other's (routes and isolation still decide)")->excludes(part);
  s->final_callback([&, part, share] {
    req["vni"] = vni;
    req["name"] = name;
    if (part->count()) req["partition"] = paths;
    if (share->count()) req["share_partition_with"] = peer;
  });
  s = leaf(tenant, "del", "Remove a tenant (refused while it has vNICs or mappings)", "tenant.del");
  s->add_option("vni", vni, "VNI")->required();
  s->final_callback([&] { req["vni"] = vni; });
  leaf(tenant, "list", "List tenants", "tenant.list")->final_callback([&] { list_key = "tenants"; });
  s = leaf(tenant, "quota", "Set a tenant's fair share of each RNIC's level-2 table, in flows (egress entries)",
           "tenant.quota");
  s->add_option("vni", vni, "VNI")->required();
  s->add_option("flows", limit,
                "Flows per RNIC; 0: the agent's default (tandem-dpu --tenant-flow-quota). A punt beyond it is\n"
                "refused and counted for the tenant (rnic show: punts.tenants)")->required();
  s->final_callback([&] { req["vni"] = vni; req["flows"] = limit; });
  s = leaf(tenant, "peer", "Let two tenants reach each other (isolation exception)", "peering.allow");
  s->add_option("a", vni, "VNI")->required();
  s->add_option("b", peer, "VNI")->required();
  s->final_callback([&] { req["a"] = vni; req["b"] = peer; });

  CLI::App* rn = group("rnic", "Managed RNICs");
  s = leaf(rn, "add", "Register an RNIC (the agent opens its channel file)", "rnic.add");
  s->add_option("name", name, "Name (e.g. h0; channel file <channel-dir>/tandem-<name>.chan)")->required();
  s->add_option("--underlay-ip", ip, "Its underlay IPv4")->required();
  s->add_option("--mac", mac, "Its underlay MAC")->required();
  s->add_option("--path-base-port", port, "First UDP source port it sprays over (default 0)");
  s->add_option("--path-count", paths, "Number of paths (default 1)");
  s->final_callback([&] {
    req.update({{"name", name}, {"underlay_ip", ip}, {"mac", mac}, {"path_base_port", port}, {"path_count", paths}});
  });
  leaf(rn, "list", "List RNICs with their channel state", "rnic.list")->final_callback([&] { list_key = "rnics"; });
  s = leaf(rn, "show", "One RNIC: state, protocol version, committed table version, BAR counters", "rnic.show");
  s->add_option("name", name, "RNIC")->required();
  s->final_callback([&] { req["name"] = name; show_key = "rnic"; });

  CLI::App* vn = group("vnic", "Tenant vNICs");
  s = leaf(vn, "add", "Add a vNIC", "vnic.add");
  s->add_option("id", id, "Agent-wide vNIC id")->required();
  s->add_option("--vni", vni, "Owning tenant")->required();
  s->add_option("--rnic", rnic, "RNIC it is bound to")->required();
  s->add_option("--ip", ip, "Overlay IPv4")->required();
  s->add_option("--mac", mac, "Overlay MAC")->required();
  s->final_callback([&] {
    req.update({{"id", id}, {"vni", vni}, {"rnic", rnic}, {"overlay_ip", ip}, {"overlay_mac", mac}});
  });
  s = leaf(vn, "del", "Remove a vNIC (its level-2 entries are withdrawn)", "vnic.del");
  s->add_option("id", id, "vNIC id")->required();
  s->final_callback([&] { req["id"] = id; });
  s = leaf(vn, "bind", "Bind a QP number to a vNIC", "vnic.bind");
  s->add_option("id", id, "vNIC id")->required();
  s->add_option("qpn", qpn, "QP number")->required();
  s->final_callback([&] { req["vnic"] = id; req["qpn"] = qpn; });
  leaf(vn, "list", "List vNICs", "vnic.list")->final_callback([&] { list_key = "vnics"; });

  CLI::App* mp = group("mapping", "Overlay -> underlay mappings");
  s = leaf(mp, "add",
           "Add a mapping. An existing (tenant, overlay IP) is refused unless --replace is given: then it is\n"
           "updated in place (a moved VM), on disk before the reply, and the RNICs get the new entries in one\n"
           "transaction each (never a moment without them)",
           "mapping.add");
  s->add_option("--vni", vni, "Tenant")->required();
  s->add_option("--overlay-ip", ip, "Overlay IPv4")->required();
  s->add_option("--underlay-ip", uip, "Underlay IPv4 of the RNIC it lives behind")->required();
  s->add_option("--next-hop-mac", mac, "Underlay next-hop MAC")->required();
  s->add_option("--rnic", rnic, "RNIC it lives behind")->required();
  s->add_flag("--replace", replace, "Replace the mapping if the key exists (add it otherwise)");
  s->final_callback([&] {
    req.update({{"vni", vni}, {"overlay_ip", ip}, {"underlay_ip", uip}, {"next_hop_mac", mac}, {"rnic", rnic}});
    if (replace) req["replace"] = true;
  });
  s = leaf(mp, "del", "Remove a mapping (installed level-2 entries derived from it are withdrawn)", "mapping.del");
  s->add_option("--vni", vni, "Tenant")->required();
  s->add_option("--overlay-ip", ip, "Overlay IPv4")->required();
  s->final_callback([&] { req.update({{"vni", vni}, {"overlay_ip", ip}}); });
  s = leaf(mp, "list", "List mappings", "mapping.list");
  auto* vopt = s->add_option("--vni", vni, "Only this tenant");
  s->add_option("--limit", limit, "At most this many rows (default 100000)");
  s->final_callback([&, vopt] {
    if (vopt->count()) req["vni"] = vni;
    if (limit) req["limit"] = limit;
    list_key = "mappings";
  });
  s = leaf(mp, "import",
           "Bulk import (all rows or none): CSV vni,overlay_ip,underlay_ip,next_hop_mac,rnic or JSONL. The agent\n"
           "reads the file itself and works through it in small steps between its RNIC duties; the reply comes\n"
           "once every row is on disk. Keys already mapped are refused unless --replace; a key twice in the\n"
           "file is refused either way",
           "mapping.import");
  s->add_option("file", file, "CSV or JSONL file")->required()->check(CLI::ExistingFile);
  s->add_option("--format", format, "csv or jsonl (default: by extension)")->check(CLI::IsMember({"csv", "jsonl"}));
  s->add_flag("--replace", replace, "Rows whose key is mapped already replace that mapping");
  s->final_callback([&] {
    req["path"] = std::filesystem::absolute(file).string();
    if (!format.empty()) req["format"] = format;
    if (replace) req["replace"] = true;
  });

  CLI::App* co = group("control", "The agent's control plane itself");
  s = leaf(co, "stats",
           "Control socket: requests, jobs, longest poll and longest gap between two polls (how long the agent\n"
           "loop went without serving the socket: a bound on its longest iteration)",
           "control.stats");
  s->add_flag("--reset", reset, "Start a new window for the maxima (after printing them)");
  s->final_callback([&] {
    if (reset) req["reset"] = true;
    show_key = ".";
  });

  CLI::App* tb = group("table", "Flow tables");
  s = leaf(tb, "dump", "Level 1 (tenants, vNICs, mappings) or level 2 (installed entries per RNIC)", "table.dump");
  s->add_option("--level", level, "1 or 2 (default 2)")->check(CLI::IsMember({1, 2}));
  auto* ropt = s->add_option("--rnic", rnic, "Only this RNIC (level 2)");
  s->final_callback([&, ropt] {
    req["level"] = level;
    if (ropt->count()) req["rnic"] = rnic;
  });

  CLI::App* fl = group("flow", "One virtual flow across the agent, both RNICs and the fabric");
  static tandem::dpu::ctl::FlowShowArgs fa{.runtime_dir = "/var/run/dpdk"};
  s = fl->add_subcommand(
      "show",
      "Level 1 (mappings, store version), each end's level-2 entries against the agent's shadow and the RNIC's\n"
      "committed version, the QPs carrying the flow (state, counters, credits, every path with its health,\n"
      "smoothed RTT, losses and removals by cause), the worker's drops and the fabric path each source port\n"
      "takes. Name the flow by tenant and overlay addresses, or by RNIC and QP number");
  s->fallthrough();
  auto* fvni = s->add_option("--vni", fa.vni, "Tenant");
  auto* fsrc = s->add_option("--src", fa.src, "Overlay source IPv4 (one of the tenant's vNICs)");
  auto* fdst = s->add_option("--dst", fa.dst, "Overlay destination IPv4");
  auto* frn = s->add_option("--rnic", fa.rnic, "RNIC (with --qpn): the flow that QP carries");
  auto* fqp = s->add_option("--qpn", fa.qpn, "QP number on --rnic (as the application sees it)");
  fvni->needs(fsrc, fdst)->excludes(frn);
  frn->needs(fqp);
  s->add_option("--fabric", fa.fabric, "tandem-fabric file prefix (default: the only fabric running here)");
  s->add_option("--runtime-dir", fa.runtime_dir, "DPDK runtime directory with the telemetry sockets");
  s->final_callback([&, fvni, frn] {
    if (!fvni->count() && !frn->count()) throw CLI::ValidationError("flow show", "give --vni/--src/--dst or --rnic/--qpn");
    req["cmd"] = "flow.show";
  });

  CLI::App* trc = group("trace", "Trace units: per-packet timelines of one flow across both RNICs and the fabric");
  static tandem::dpu::ctl::TraceArgs ta;
  ta.flow.runtime_dir = "/var/run/dpdk";
  s = trc->add_subcommand("start",
                          "Install a rule for one flow in both workers and the lab fabric (over their telemetry):\n"
                          "their matching packets leave records in each process's trace ring");
  s->fallthrough();
  s->add_option("--vni", ta.flow.vni, "Tenant")->required();
  s->add_option("--src", ta.flow.src, "Overlay source IPv4")->required();
  s->add_option("--dst", ta.flow.dst, "Overlay destination IPv4")->required();
  s->add_option("--qpn", ta.qpn, "Only this QP of the source end (and its peer)");
  auto* tcount = s->add_option("--count", ta.count, "Records each process writes at most");
  s->add_option("--seconds", ta.seconds, "For this long (default 10 s unless --count)")->excludes(tcount);
  s->add_option("--fabric", ta.flow.fabric, "tandem-fabric file prefix (default: the only fabric running here)");
  s->add_option("--runtime-dir", ta.flow.runtime_dir, "DPDK runtime directory");
  s->final_callback([&] { req["cmd"] = "trace.start"; });
  s = trc->add_subcommand("stop", "Remove the rule from the processes trace start armed (records stay)");
  s->fallthrough();
  s->final_callback([&] { req["cmd"] = "trace.stop"; });
  s = trc->add_subcommand("show",
                          "Merge the armed processes' trace rings into per-packet timelines: where each packet ended\n"
                          "(delivered, dropped at a stage for a reason, in flight), its retransmissions, the latency\n"
                          "between stages. Without --all only packets with a drop, a retransmission or no delivery");
  s->fallthrough();
  s->add_flag("--all", ta.all, "Every packet's timeline");
  s->add_option("--limit", ta.limit, "Timelines printed at most (default 20)");
  s->add_option("--prefix", ta.prefixes, "Read these processes' rings (file prefixes) instead of the session's");
  s->add_option("--runtime-dir", ta.flow.runtime_dir, "DPDK runtime directory");
  s->final_callback([&] { req["cmd"] = "trace.show"; });

  tandem::dpu::ctl::FleetCli fleet;
  tandem::dpu::ctl::add_fleet_commands(app, req, fleet);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  tandem::common::log::set_level(*tandem::common::log::parse_level(log_level));

  if (req.value("cmd", "").rfind("trace.", 0) == 0) {
    ta.flow.socket = socket;
    ta.flow.json = as_json;
    const std::string c = req["cmd"];
    return c == "trace.start" ? tandem::dpu::ctl::trace_start(ta)
                              : c == "trace.stop" ? tandem::dpu::ctl::trace_stop(ta) : tandem::dpu::ctl::trace_show(ta);
  }
  if (req.value("cmd", "") == "flow.show") {
    fa.socket = socket;
    fa.json = as_json;
    return tandem::dpu::ctl::flow_show(fa);
  }
  json reply;
  const bool to_etcd = req.value("cmd", "").rfind("fleet.", 0) == 0;
  try {
    reply = to_etcd ? tandem::dpu::ctl::fleet_call(fleet, req) : tandem::dpu::ctl::call(socket, req);
  } catch (const std::exception& e) {
    tandem::common::log::error("{}", e.what());
    return 2;
  }
  bool ok = reply.value("ok", false);
  if (as_json) {
    std::cout << reply.dump(2) << "\n";
    return ok ? 0 : 2;
  }
  if (!ok) {
    std::string code = reply.value("code", "error");
    tandem::common::log::error("refused ({}): {}", code, reply.value("error", ""));
    std::string cmd = req.value("cmd", "");
    if (code == "duplicate" && (cmd == "mapping.add" || cmd == "mapping.import") && !req.contains("replace"))
      tandem::common::log::error("nothing changed; to change an existing mapping, add --replace");
    return 2;
  }
  if (!list_key.empty()) {
    print_table(reply[list_key]);
    if (reply.value("truncated", false))
      std::printf("(%s of %s shown)\n", std::to_string(reply[list_key].size()).c_str(), reply["total"].dump().c_str());
  } else if (show_key == ".") {
    reply.erase("ok");
    print_kv(reply);
  } else if (!show_key.empty()) {
    print_kv(reply[show_key]);
  } else if (req["cmd"] == "fleet.show") {
    std::printf("revision %s\ntenants:\n", reply["revision"].dump().c_str());
    print_table(reply["tenants"]);
    std::puts("rnics:");
    print_table(reply["rnics"]);
    std::puts("vnics:");
    print_table(reply["vnics"]);
    std::printf("extra mappings: %s, peerings: %s, malformed keys: %s\n", reply["mappings"].dump().c_str(),
                std::to_string(reply["peerings"].size()).c_str(), reply["malformed"].dump().c_str());
  } else if (req["cmd"] == "fleet.status") {
    std::printf("desired revision %s; %s server(s) converged%s\n", reply["desired_revision"].dump().c_str(),
                reply["converged"].dump().c_str(), reply["all_converged"] == true ? " (all)" : "");
    print_table(reply["servers"]);
  } else if (req["cmd"].get<std::string>().rfind("fleet.", 0) == 0) {
    std::printf("ok (etcd revision %s)\n", reply.value("revision", json(0)).dump().c_str());
  } else if (req["cmd"] == "table.dump") {
    if (reply["level"] == 1) {
      std::puts("tenants:");
      print_table(reply["tenants"]);
      std::puts("vnics:");
      print_table(reply["vnics"]);
      std::puts("mappings:");
      print_table(reply["mappings"]);
    } else {
      for (const auto& [n, t] : reply["rnics"].items()) {
        std::printf("%s: version %s, %s entries, digest %s\n", n.c_str(), t["version"].dump().c_str(),
                    t["count"].dump().c_str(), t["digest"].dump().c_str());
        // One table per kind (vNICs first): kinds have different columns.
        for (const char* kind : {"vnic", "egress", "ingress_vni", "ingress_qpn", "invalid"}) {
          json rows = json::array();
          for (const json& e : t["entries"])
            if (e.value("kind", "") == kind) rows.push_back(e);
          if (rows.empty()) continue;
          std::printf("  %s entries:\n", kind);
          print_table(rows);
        }
        if (t["entries"].empty()) print_table(t["entries"]);
      }
    }
  } else if (reply.contains("imported")) {
    std::printf("imported %s mappings (%s replaced)\n", reply["imported"].dump().c_str(),
                reply.value("replaced", json(0)).dump().c_str());
  } else if (reply.contains("replaced")) {
    std::puts(reply["replaced"] == true ? "ok (replaced)" : "ok (added)");
  } else {
    std::puts("ok");
  }
  return 0;
}
