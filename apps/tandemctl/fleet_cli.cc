#include "apps/tandemctl/fleet_cli.h"

#include <cstdlib>
#include <filesystem>

#ifdef TANDEM_FLEET
#include "dpu/fleet/fleet_admin.h"
#endif

namespace tandem::dpu::ctl {

using nlohmann::json;

void add_fleet_commands(CLI::App& app, json& req, FleetCli& o) {
  CLI::App* f = app.add_subcommand("fleet",
                                   "The fleet's desired state in etcd (docs/fleet.md): every agent started with\n"
                                   "--etcd applies its slice of it. Writes are etcd transactions; nothing is half-written");
  f->require_subcommand(1);
  f->fallthrough();
  f->add_option("--etcd", o.endpoints, "etcd endpoints host:port,... (default 127.0.0.1:2379)");
  f->add_option("--etcd-cacert", o.cacert, "TLS: etcd's CA certificate (PEM)");
  f->add_option("--etcd-cert", o.cert, "TLS: client certificate (PEM)");
  f->add_option("--etcd-key", o.key, "TLS: client key (PEM)");
  f->add_option("--etcd-user", o.user, "etcd user (password from $TANDEM_ETCD_PASSWORD)");
  static uint64_t vni = 0, id = 0, part = 0, quota = 0, port = 0, paths = 1, per_txn = 100, peer = 0;
  static std::string name, server, rnic, ip, mac, uip, file;
  static bool replace = false;
  auto group = [&](const char* n, const char* help) {
    CLI::App* g = f->add_subcommand(n, help);
    g->require_subcommand(1);
    g->fallthrough();
    return g;
  };
  auto leaf = [&](CLI::App* g, const char* n, const char* help, const char* cmd) {
    CLI::App* s = g->add_subcommand(n, help);
    s->fallthrough();
    s->preparse_callback([&req, cmd](std::size_t) { req["cmd"] = cmd; });
    return s;
  };

  CLI::App* t = group("tenant", "Tenants");
  CLI::App* s = leaf(t, "add", "Add a tenant (its partition is fleet-wide: the lowest free one unless given)",
                     "fleet.tenant.add");
  s->add_option("vni", vni, "VNI")->required();
  s->add_option("name", name, "Name")->required();
  auto* po = s->add_option("--partition", part, "Partition 1..32766 (docs/partitions.md)");
  auto* qo = s->add_option("--flow-quota", quota, "Flows per RNIC (0: each agent's default)");
  s->final_callback([&, po, qo] {
    req.update({{"vni", vni}, {"name", name}});
    if (po->count()) req["partition"] = part;
    if (qo->count()) req["flow_quota"] = quota;
  });
  s = leaf(t, "del", "Remove a tenant (refused while it has vNICs or mappings; its peerings go too)", "fleet.tenant.del");
  s->add_option("vni", vni, "VNI")->required();
  s->final_callback([&] { req["vni"] = vni; });
  s = leaf(t, "peer", "Let two tenants reach each other", "fleet.peering.add");
  s->add_option("a", vni, "VNI")->required();
  s->add_option("b", peer, "VNI")->required();
  s->final_callback([&] { req.update({{"a", vni}, {"b", peer}}); });

  CLI::App* r = group("rnic", "Servers' RNICs (names are fleet-wide)");
  s = leaf(r, "add", "Register an RNIC of a server", "fleet.rnic.add");
  s->add_option("server", server, "Server")->required();
  s->add_option("name", name, "RNIC name")->required();
  s->add_option("--underlay-ip", ip, "Underlay IPv4")->required();
  s->add_option("--mac", mac, "Underlay MAC")->required();
  s->add_option("--path-base-port", port, "First UDP source port (default 0)");
  s->add_option("--path-count", paths, "Paths (default 1)");
  s->final_callback([&] {
    req.update({{"server", server}, {"name", name}, {"underlay_ip", ip}, {"mac", mac}, {"path_base_port", port},
                {"path_count", paths}});
  });
  s = leaf(r, "del", "Remove an RNIC from the desired state", "fleet.rnic.del");
  s->add_option("server", server, "Server")->required();
  s->add_option("name", name, "RNIC name")->required();
  s->final_callback([&] { req.update({{"server", server}, {"name", name}}); });

  CLI::App* v = group("vnic", "vNICs placed on servers' RNICs (other servers derive their mappings)");
  s = leaf(v, "add", "Place a vNIC", "fleet.vnic.add");
  s->add_option("id", id, "Fleet-wide vNIC id")->required();
  s->add_option("--vni", vni, "Tenant")->required();
  s->add_option("--server", server, "Server")->required();
  s->add_option("--rnic", rnic, "RNIC of that server")->required();
  s->add_option("--ip", ip, "Overlay IPv4")->required();
  s->add_option("--mac", mac, "Overlay MAC")->required();
  s->final_callback([&] {
    req.update({{"id", id}, {"vni", vni}, {"server", server}, {"rnic", rnic}, {"overlay_ip", ip}, {"overlay_mac", mac}});
  });
  s = leaf(v, "del", "Remove a vNIC", "fleet.vnic.del");
  s->add_option("id", id, "vNIC id")->required();
  s->final_callback([&] { req["id"] = id; });
  s = leaf(v, "move", "Move a vNIC to another server's RNIC (a VM migration), in one etcd transaction",
           "fleet.vnic.move");
  s->add_option("id", id, "vNIC id")->required();
  s->add_option("--server", server, "New server")->required();
  s->add_option("--rnic", rnic, "RNIC of the new server")->required();
  s->final_callback([&] { req.update({{"id", id}, {"server", server}, {"rnic", rnic}}); });

  CLI::App* m = group("mapping", "Extra mappings (addresses that are not vNICs of the fleet)");
  s = leaf(m, "add", "Add a mapping (--replace: change an existing one)", "fleet.mapping.add");
  s->add_option("--vni", vni, "Tenant")->required();
  s->add_option("--overlay-ip", ip, "Overlay IPv4")->required();
  s->add_option("--underlay-ip", uip, "Underlay IPv4")->required();
  s->add_option("--next-hop-mac", mac, "Underlay next-hop MAC")->required();
  s->add_option("--rnic", rnic, "RNIC it lives behind")->required();
  s->add_flag("--replace", replace, "Replace the mapping if it exists");
  s->final_callback([&] {
    req.update({{"vni", vni}, {"overlay_ip", ip}, {"underlay_ip", uip}, {"next_hop_mac", mac}, {"rnic", rnic}});
    if (replace) req["replace"] = true;
  });
  s = leaf(m, "del", "Remove a mapping", "fleet.mapping.del");
  s->add_option("--vni", vni, "Tenant")->required();
  s->add_option("--overlay-ip", ip, "Overlay IPv4")->required();
  s->final_callback([&] { req.update({{"vni", vni}, {"overlay_ip", ip}}); });
  s = leaf(m, "import", "Write a CSV of mappings (vni,overlay_ip,underlay_ip,next_hop_mac,rnic) to etcd",
           "fleet.mapping.import");
  s->add_option("file", file, "CSV file")->required()->check(CLI::ExistingFile);
  s->add_option("--per-txn", per_txn, "Rows per etcd transaction, 1..128 (default 100)");
  s->final_callback([&] { req.update({{"path", std::filesystem::absolute(file).string()}, {"per_txn", per_txn}}); });

  leaf(f, "show", "The desired state: tenants, RNICs, vNICs, counts", "fleet.show");
  leaf(f, "status", "Every server: health, applied revision, converged or not, RNIC states", "fleet.status");
}

json fleet_call(const FleetCli& o, const json& req) {
#ifdef TANDEM_FLEET
  fleet::EtcdOptions e;
  e.endpoints = o.endpoints;
  e.cacert = o.cacert;
  e.cert = o.cert;
  e.key = o.key;
  e.user = o.user;
  if (const char* pw = std::getenv("TANDEM_ETCD_PASSWORD")) e.password = pw;
  return fleet::fleet_command(e, req);
#else
  (void)o;
  (void)req;
  return json{{"ok", false}, {"code", "unsupported"},
              {"error", "this tandemctl was built without fleet mode (run scripts/setup.sh, rebuild)"}};
#endif
}

}  // namespace tandem::dpu::ctl
