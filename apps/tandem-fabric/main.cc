// tandem-fabric: the lab's leaf-spine on one machine. Flags -> FabricConfig
// -> common/fabric/dpdk run(); EAL arguments come after `--`.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "common/dpdk/eal_args.h"
#include "common/fabric/dpdk/fabric.h"
#include "common/fabric/path_spec.h"
#include "common/log/log_cli.h"

namespace fab = tandem::common::fabric;

int main(int argc, char** argv) {
  auto [app_argc, eal_args] = tandem::common::dpdk::split_eal_args(argc, argv);

  CLI::App app{
      "tandem-fabric: the lab network on one machine. One DPDK primary with one port per attached\n"
      "host (RNIC worker); forwards by underlay destination IPv4, spreads packets over K internal\n"
      "paths by the ECMP hash of the 5-tuple (UDP source port included, as RoCEv2 entropy), and\n"
      "impairs each path: delay, jitter, loss, rate, tail-drop queue, ECN marking, fail/heal.\n\n"
      "Ports are the EAL's ports in --vdev order (port 0 = first --vdev). Prefer memif with the\n"
      "fabric as server (start the fabric first; see common/fabric/dpdk/MEMIF.md).\n\n"
      "Example:\n"
      "  tandem-fabric --route 10.0.0.1=0 --route 10.0.0.2=1 --paths 4 \\\n"
      "      --path 2:delay_us=50,loss=0.01 --path 3:down --idle adaptive -- \\\n"
      "      --no-pci --file-prefix=fabric -l 1 -m 128 \\\n"
      "      --vdev=net_memif0,role=server,socket=/tmp/h0.sock \\\n"
      "      --vdev=net_memif1,role=server,socket=/tmp/h1.sock\n\n"
      "Path spec keys: delay_us, delay_ns, jitter_us, jitter_ns, loss (0..1), rate_gbps, rate_mbps,\n"
      "queue_kb, queue_bytes, ecn_kb, ecn_bytes, and the words up / down. Without rate there is no\n"
      "serialisation and no queue (so queue/ECN thresholds need a rate).\n\n"
      "Run time (dpdk-telemetry.py -f <file-prefix>):\n"
      "  /tandem/fabric/ports              per-port counters (rx, tx, drops by reason)\n"
      "  /tandem/fabric/paths              per-path counters (delivered, drops by reason, ECN, queue)\n"
      "  /tandem/fabric/path_set,<k>,down  fail path k (packets it held are lost)\n"
      "  /tandem/fabric/path_set,<k>,up    heal path k\n"
      "  /tandem/fabric/path_set,<k>,loss=<p>  change path k's loss probability\n"
      "dpdk-dumpcap -i <port name> captures a port. SIGINT/SIGTERM stop cleanly and print counters."};
  app.set_help_flag("-h,--help", "Show this help and exit");

  fab::FabricConfig c;
  std::string yaml;
  std::vector<std::string> routes, path_specs;
  unsigned n_paths = 0;
  std::string default_spec, idle = "busy";
  app.add_option("--config", yaml, "YAML file with routes, paths, ecmp_seed, seed (flags override)")
      ->check(CLI::ExistingFile);
  app.add_option("--route", routes, "IP=PORT: host address behind port (repeatable)");
  app.add_option("--paths", n_paths, "Number of internal paths K (default 1, or as many as the YAML lists)");
  app.add_option("--path-default", default_spec, "Path spec applied to every path before --path");
  app.add_option("--path", path_specs, "K:SPEC, impairments of path K (repeatable), e.g. 2:loss=0.1");
  app.add_option("--ecmp-seed", c.ecmp_seed, "Seed of the ECMP hash (default 0, as tandem-sim)");
  app.add_option("--seed", c.rng_seed, "Seed of the loss/jitter random generator (default 1)");
  app.add_option("--hold", c.hold_per_path, "Mbufs a path can hold in flight, power of two (default 2048)");
  app.add_option("--rxd", c.port.rx_desc, "RX ring size per port (default 512)");
  app.add_option("--txd", c.port.tx_desc, "TX ring size per port (default 512)");
  app.add_option("--rx-queues", c.port.rx_queues,
                 "Queue pairs per port, every RX queue polled (default 1): a memif client with several queues "
                 "(tandem-rnic --lcores N) connects only to a server with as many; the fabric sends on queue 0")
      ->check(CLI::Range(1, 16));
  app.add_option("--link-wait-ms", c.port.link_wait_ms, "How long to wait for each port's link (default 2000)");
  app.add_option("--idle", idle, "busy (poll, default) or adaptive (pause, then 50 us sleeps when idle; never sleeps while a path holds packets, so delays stay exact)")
      ->check(CLI::IsMember({"busy", "adaptive"}));
  app.add_option("--duration", c.duration_s, "Stop after this many seconds (default: run until a signal)");
  app.add_option("--stats-json", c.stats_json, "Write the counters to this file at exit");
  app.add_flag("!--no-pdump", c.pdump, "Do not initialise rte_pdump (dpdk-dumpcap support)");
  std::string log_level = "info";
  tandem::common::log::add_level_option(app, log_level);

  try {
    app.parse(app_argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  tandem::common::log::init_from_flag("tandem-fabric", log_level);
  c.port.tx_queues = c.port.rx_queues;  // memif: the client's RX rings are the server's TX rings
  try {
    if (!yaml.empty()) fab::load_fabric_yaml(yaml, c);
    for (const auto& r : routes) c.routes.push_back(fab::parse_route(r));
    if (n_paths != 0) c.paths.resize(n_paths);
    if (!default_spec.empty())
      for (auto& p : c.paths) p = tandem::common::parse_path_spec(default_spec, p);
    for (const auto& s : path_specs) {
      const auto colon = s.find(':');
      if (colon == std::string::npos) throw std::invalid_argument("--path wants K:SPEC, got '" + s + "'");
      const unsigned long k = std::stoul(s.substr(0, colon));
      if (k >= c.paths.size())
        throw std::invalid_argument("--path " + s + ": there are only " + std::to_string(c.paths.size()) +
                                    " paths (use --paths)");
      c.paths[k] = tandem::common::parse_path_spec(s.substr(colon + 1), c.paths[k]);
    }
    c.idle.mode = idle == "adaptive" ? tandem::common::dpdk::IdleMode::kAdaptive
                                     : tandem::common::dpdk::IdleMode::kBusy;
    c.eal_args = eal_args;
    if (eal_args.empty()) throw std::invalid_argument("EAL arguments missing: add -- --no-pci --vdev=... (see --help)");
  } catch (const std::exception& e) {
    tandem::common::log::error("{}", e.what());
    return 2;
  }
  try {
    return fab::run(c);
  } catch (const std::invalid_argument& e) {
    tandem::common::log::error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {
    tandem::common::log::error("{}", e.what());
    return 1;
  }
}
