// tandem-dpu: the DPU control agent. Flags -> AgentConfig -> dpu/dpdk run();
// EAL arguments come after `--`.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "common/dpdk/eal_args.h"
#include "common/log/log_cli.h"
#include "dpu/dpdk/agent.h"

namespace dd = tandem::dpu::dpdk;

int main(int argc, char** argv) {
  auto [app_argc, eal_args] = tandem::common::dpdk::split_eal_args(argc, argv);

  CLI::App app{
      "tandem-dpu: the DPU control agent. Owns tenants, vNICs, overlay->underlay mappings and the\n"
      "isolation policy (SQLite, every accepted change committed before it is acknowledged), and the\n"
      "level-2 flow table of each managed RNIC: one shared-memory channel file per RNIC\n"
      "(<channel-dir>/tandem-<rnic>.chan: header, BAR, two rte_rings, punt slots) over which it sends\n"
      "transactions; table misses punted by an RNIC are resolved against level 1 and installed.\n"
      "Operators use tandemctl over --control-socket (newline-delimited JSON).\n\n"
      "Example:\n"
      "  tandem-dpu --db /var/lib/tandem/dpu.sqlite --control-socket /run/tandem/dpu.sock \\\n"
      "      --channel-dir /dev/shm --rnic h0 --rnic h1 --idle adaptive -- \\\n"
      "      --no-pci --no-huge -m 64 --file-prefix=tandem-dpu -l 0\n"
      "  tandem-rnic ... --dpu-channel /dev/shm/tandem-h0.chan\n\n"
      "Run time (dpdk-telemetry.py -f <file-prefix>): /tandem/dpu/rnics. SIGINT/SIGTERM stop it;\n"
      "kill -9 loses nothing acknowledged (RNICs go HEADLESS and keep forwarding until it returns)."};
  app.set_help_flag("-h,--help", "Show this help and exit");

  dd::AgentConfig c;
  std::string idle = "busy";
  app.add_option("--db", c.db, "SQLite database holding the agent's state (created if missing)")->required();
  app.add_option("--control-socket", c.control_socket,
                 "Unix socket tandemctl talks to (default /run/tandem/dpu.sock; mode 0600, its directory made if\n"
                 "missing). Only root, this agent's user and --control-group may connect (peer credentials)");
  app.add_option("--control-group", c.control_group,
                 "Members of this group may use the control socket too (it becomes 0660, group-owned)");
  app.add_option("--channel-dir", c.channel_dir,
                 "Directory for the per-RNIC channel files: /dev/shm (default) or a hugetlbfs mount")
      ->check(CLI::ExistingDirectory);
  app.add_option("--rnic", c.rnics,
                 "Open a channel for this RNIC (repeatable); RNICs registered with `tandemctl rnic add` get one too");
  app.add_option("--idle", idle, "busy (poll) or adaptive (pause, then 50 us sleeps when idle)")
      ->check(CLI::IsMember({"busy", "adaptive"}));
  app.add_option("--heartbeat-timeout-ms", c.heartbeat_timeout_ms,
                 "An RNIC whose BAR heartbeat stalls this long is DEGRADED (default 1000)");
  app.add_option("--tenant-flow-quota", c.tenant_flow_quota,
                 "Flows (egress entries) one tenant may hold on each RNIC unless `tandemctl tenant quota` sets\n"
                 "its own (default 0: a quarter of the RNIC's --table-capacity, so a tenant's flows and their\n"
                 "ingress entries fill at most half of it). A punt beyond it is refused, counted per tenant");
  app.add_option("--punts-per-round", c.punts_per_round,
                 "Punts served per RNIC per loop iteration, one per tenant in turn (default 64): a punt storm\n"
                 "from one tenant waits behind itself, not in front of the others")->check(CLI::Range(1u, 65536u));
  app.add_option("--max-protocol", c.max_protocol,
                 "Newest channel protocol version to offer (default: the current one, 3). Rollout drills: 2 behaves\n"
                 "as the previous release, which sends no vNIC entries (workers then use their YAML vNICs)");
  app.add_option("--etcd", c.fleet.endpoints,
                 "Fleet mode (docs/fleet.md): take the desired state from etcd at these endpoints\n"
                 "(host:port,host:port,...), watch it and apply every change in revision order; needs --server");
  app.add_option("--server", c.fleet.server, "This server's name in the fleet's desired state (with --etcd)");
  app.add_option("--etcd-cacert", c.fleet.cacert, "TLS: CA certificate of etcd's (PEM); enables TLS")
      ->check(CLI::ExistingFile);
  app.add_option("--etcd-cert", c.fleet.cert, "TLS: this agent's client certificate (PEM)")->check(CLI::ExistingFile);
  app.add_option("--etcd-key", c.fleet.key, "TLS: this agent's client key (PEM)")->check(CLI::ExistingFile);
  app.add_option("--etcd-user", c.fleet.user, "etcd authentication: user (password from $TANDEM_ETCD_PASSWORD)");
  app.add_option("--fleet-lease-ttl", c.fleet.lease_ttl_s,
                 "Seconds this server's status stays in etcd after the agent dies (default 5)")
      ->check(CLI::Range(2, 3600));
  app.add_option("--duration", c.duration_s, "Stop after this many seconds (default: until SIGINT/SIGTERM)");
  std::string log_level = "info";
  tandem::common::log::add_level_option(app, log_level);

  try {
    app.parse(app_argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  tandem::common::log::init_from_flag("tandem-dpu", log_level);
  c.idle.mode = idle == "adaptive" ? tandem::common::dpdk::IdleMode::kAdaptive : tandem::common::dpdk::IdleMode::kBusy;
  c.eal_args = eal_args;
  if (const char* pw = std::getenv("TANDEM_ETCD_PASSWORD")) c.fleet.password = pw;
  try {
    return dd::run(c);
  } catch (const std::exception& e) {
    tandem::common::log::error("{}", e.what());
    return 2;
  }
}
