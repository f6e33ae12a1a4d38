// tandem-rnic: one RNIC port's fast path. Flags -> WorkerConfig -> rnic/dpdk
// run(); EAL arguments come after `--`.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "common/dpdk/eal_args.h"
#include "common/log/log_cli.h"
#include "rnic/dpdk/worker.h"
#include "rnic/host/device_registry.h"
#include "rnic/host/resource_quota.h"

namespace rd = tandem::rnic::dpdk;

int main(int argc, char** argv) {
  auto [app_argc, eal_args] = tandem::common::dpdk::split_eal_args(argc, argv);

  CLI::App app{
      "tandem-rnic: the RoCEv2 RC fast path of one RNIC port, on DPDK. Its own DPDK primary with one\n"
      "port (the first EAL port: any PMD). Tenant applications attach through --host-socket\n"
      "(rnic/host verbs library); their QPs run on the sans-I/O transport core (rnic/core); frames\n"
      "are encapsulated with the underlay addresses of the level-2 table (--table, standalone mode).\n\n"
      "Example (lab: tandem-fabric is the memif server, start it first):\n"
      "  tandem-rnic --name h0 --host-socket /tmp/h0.rnic --table h0.yaml --idle adaptive -- \\\n"
      "      --no-pci --file-prefix=rnic-h0 -l 0 -m 128 \\\n"
      "      --vdev=net_memif0,role=client,socket=/tmp/h0.sock\n"
      "Real NIC: -a <pci> instead of --no-pci/--vdev (mlx5, or virtio: -a 0000:00:04.0);\n"
      "AF_XDP: --vdev=net_af_xdp0,iface=eth1.\n\n"
      "Further EAL ports are receive-only (e.g. --vdev=net_pcap1,rx_pcap=crafted.pcap,tx_pcap=/dev/null\n"
      "to replay crafted frames at the worker).\n"
      "Run time (dpdk-telemetry.py -f <file-prefix>): /tandem/rnic/stats, /tandem/rnic/qps,\n"
      "/tandem/rnic/table. dpdk-dumpcap -i <port> captures the port. SIGINT/SIGTERM flush every\n"
      "QP (applications see IBV_WC_WR_FLUSH_ERR), print the counters and write --stats-json."};
  app.set_help_flag("-h,--help", "Show this help and exit");

  rd::WorkerConfig c;
  std::string mode = "irn", idle = "busy";
  app.add_option("--name", c.name, "Name in logs and telemetry (default rnic0)");
  app.add_option("--host-socket", c.host_socket, "Unix socket where tenant applications attach")->required();
  app.add_option("--table", c.table_file,
                 "Standalone level-2 table (YAML): underlay ip/mac/gateway_mac, vnics, egress, ingress")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--mtu", c.mtu, "Largest path MTU a QP may use: 256..4096 (default 1024; a QP's own value is capped)");
  app.add_flag("--no-cm", [&c](int64_t) { c.cm = false; },
               "No connection manager: no QP1, no rdma_cm (CM MADs are dropped as unknown_qpn)");
  app.add_option("--cm-timeout", c.cm_response_timeout,
                 "CM response timeout it announces and waits, as IBA's exponent: 4.096 us * 2^x (default 16: 268 ms)")
      ->check(CLI::Range(8, 24));
  app.add_option("--cm-retries", c.cm_max_retries, "CM MADs resent before a connection attempt fails (default 8)")
      ->check(CLI::Range(0, 15));
  app.add_option("--mode", mode, "Loss recovery of every QP: irn (out-of-order placement, SACK; default) or gbn")
      ->check(CLI::IsMember({"irn", "gbn"}));
  app.add_option("--spray", c.spray, "Path (spraying) policy of rnic/core policy_factory (default single)");
  app.add_option("--cc", c.cc, "Congestion-control policy of rnic/core policy_factory (default fixed_window)");
  app.add_option("--cc-window", c.cc_window_bytes, "Bytes in flight per QP for fixed_window (default 1 MiB)");
  app.add_option("--reorder-delay-us", [&c](const CLI::results_t& r) {
        c.reorder_delay_ns = std::stoull(r[0]) * 1000;
        return true;
      }, "IRN: how long a gap may last before it is SACKed (default 50)");
  app.add_option("--timeout-us", [&c](const CLI::results_t& r) {
        c.timeout_ns = std::stoull(r[0]) * 1000;
        return true;
      }, "Retransmission timeout when the application sets none, and the floor of the one it sets (4.096 us << ibv_qp_attr.timeout); default 1000");
  app.add_flag("--bench-any-psn", c.bench_any_psn,
               "BENCHMARK ONLY, not RC: every QP accepts a request at any PSN (a PSN other than the expected one\n"
               "restarts the QP's receive sequence there), so pktgen's looped pcap replays are placed, not dropped\n"
               "as duplicates; counted in core_bench_accepted/_duplicate/_gap. Refused with --dpu-channel\n"
               "(tenant QPs). See docs/pktgen.md");
  app.add_flag("--tx-copy", c.tx_copy,
               "Copy payloads into mbufs instead of attaching registered memory as external buffers "
               "(always on for ports that cannot read application memory: net_virtio_user, net_virtio, "
               "hardware in IOVA-as-PA mode; the start-up line says which and why)");
  app.add_option("--idle", idle, "busy (poll) or adaptive (pause, then 50 us sleeps when idle)")
      ->check(CLI::IsMember({"busy", "adaptive"}));
  app.add_option("--duration", c.duration_s, "Stop after this many seconds (default: until SIGINT/SIGTERM)");
  c.device_dir = tandem::rnic::host::device_dir();
  app.add_option("--device-dir", c.device_dir,
                 "Register each vNIC here as a verbs device for the drop-in libibverbs (tandem_<name>_v<vnic id>; "
                 "default $TANDEM_DEVICES or /run/tandem; \"\" to not register)");
  app.add_option("--device-owner", [&c](const CLI::results_t& r) {
        for (const std::string& s : r) {
          unsigned id = 0, uid = 0, gid = 0;
          char tail = 0;
          const int n = std::sscanf(s.c_str(), "%u=%u:%u%c", &id, &uid, &gid, &tail);
          if (n != 2 && n != 3) throw CLI::ValidationError("--device-owner", "want VNIC=UID[:GID], got " + s);
          c.device_owners.push_back({id, uid, n == 3 ? int64_t{gid} : -1});
        }
        return true;
      }, "Who may open vNIC VNIC's device: UID (or primary group GID), checked on the peer's credentials "
         "(SO_PEERCRED) at attach; repeatable. With any, the host socket is opened to all users and a vNIC "
         "admits only root, the worker's user and its owners (an application bound to no vNIC: owners of all); "
         "a refusal is counted (attach_denied) and ibv_open_device fails with EACCES. Default: the socket's "
         "file permissions alone decide")
      ->take_all()
      ->allow_extra_args(false)
      ->type_name("VNIC=UID[:GID]");
  app.add_option("--stats-json", c.stats_json, "Write the counters to this file at exit");
  app.add_option("--lcores", c.lcores,
                 "Worker lcores for the port (default 1; the EAL's -l must give as many). Each has its own TX "
                 "queue, RX queue where the device has enough, mbuf cache, timers and counters; an application "
                 "and all its QPs live on one (placed at attach: fewest applications, then QPs), frames for "
                 "another lcore's QP are handed to it by destination QP. In DPU mode lcore 0 serves the agent's "
                 "channel; every lcore reads the table at a version it adopted, and a commit is told to the agent "
                 "once every lcore sees it")
      ->check(CLI::Range(1, 8));
  app.add_option("--app-inflight-pkts", c.app_inflight_pkts,
                 "data packets in flight per lcore, shared equally by the applications that have some (one alone "
                 "may use all; zero-length packets count), so that no tenant floods the receivers and rings the "
                 "others share (default 1024, about one QP's window; 0: no limit)");
  app.add_option("--max-qps", c.max_qps, "QPs this worker can run (default 16384; a created QP costs ~90 KiB of worker memory, mostly its 1024-PSN window; an unused slot a few hundred bytes); also the base of --limit-per-vnic's defaults");
  const auto limit_option = [&app](const char* name, std::vector<tandem::rnic::host::LimitSetting>& into,
                                   const char* help) {
    app.add_option(name, [&into, name](const CLI::results_t& r) {
          for (const std::string& s : r) {
            std::string err;
            if (!tandem::rnic::host::parse_limits(s, &into, &err)) throw CLI::ValidationError(name, err);
          }
          return true;
        }, help)
        ->take_all()
        ->allow_extra_args(false)
        ->type_name("RES=N[,RES=N]");
  };
  limit_option("--limit-per-vnic", c.vnic_limits,
               "Fair share of one vNIC (its applications together; applications bound to no vNIC are one more\n"
               "group): RES is qps, cqs, mrs, pds, bytes, srqs or queue_bytes, N a count (K/M/G/T suffixes) or\n"
               "none; repeatable. Default 3/4 of the worker's capacity, so one tenant always leaves a quarter to\n"
               "the others: qps and cqs 3/4 of --max-qps, mrs 3/2 of it (one vNIC's QP, CQ and MR mappings, one\n"
               "each, then stay under Linux's 65,530 per process at the default --max-qps), pds 3/4 of it, bytes\n"
               "3/4 of the host's memory (what the worker maps and DMA-maps: an MR's whole memfd), srqs 48 of the\n"
               "64 per lcore the transport holds, queue_bytes 3/4 of what --max-qps QPs of 1024x1024 cost (at most\n"
               "a quarter of memory; a QP is charged its rings plus the transport's records for its depths: ~0.8\n"
               "MiB at 1024x1024, ~24 MiB at 32Kx32K; SRQs and CQs likewise). A create over a count fails in\n"
               "the application with EAGAIN (as the kernel's rdma cgroup answers), one over bytes or queue_bytes\n"
               "with ENOMEM (as RLIMIT_MEMLOCK does), and is counted per vNIC: host_refused_<RES> in\n"
               "/tandem/rnic/stats, per vNIC in /tandem/rnic/limits and --stats-json \"limits\"");
  limit_option("--limit-per-app", c.app_limits,
               "Limit of one application (one attached process context), same RES=N form and errors as\n"
               "--limit-per-vnic; default none beyond its vNIC's share");
  app.add_option("--dpu-channel", c.dpu_channel,
                 "DPU mode: tandem-dpu's channel file for this port (e.g. /dev/shm/tandem-h0.chan); the agent\n"
                 "programs the level-2 table and the port's vNICs (protocol v3) and resolves misses; --table then\n"
                 "only gives the underlay address (its vNICs serve only an older agent). Without the agent's heartbeat the worker goes HEADLESS and keeps forwarding.");
  app.add_option("--punt-budget", [&c](const CLI::results_t& r) {
        unsigned long long rate = 0;
        unsigned burst = 0;
        char tail = 0;
        const int n = std::sscanf(r[0].c_str(), "%llu:%u%c", &rate, &burst, &tail);
        if ((n != 1 && n != 2) || (n == 2 && burst == 0))
          throw CLI::ValidationError("--punt-budget", "want RATE[:BURST], got " + r[0]);
        c.punt_budget.rate_per_s = rate;
        if (n == 2) c.punt_budget.burst = burst;
        return true;
      }, "DPU mode: table misses each vNIC may punt to the agent, per second and at once (a token bucket per\n"
         "vNIC, before the channel): default 1000:128, well above a tenant's rate of new flows, while a storm of\n"
         "misses from one vNIC is held to it instead of filling the channel's slots and the agent's event queue\n"
         "ahead of the other tenants' new flows. A miss over it is not punted (its key is tried again 2 ms\n"
         "later) and is counted per vNIC:\n"
         "dpu_punts_over_budget in /tandem/rnic/stats, /tandem/rnic/punts, the agent's punts_dropped. 0: no budget")
      ->type_name("RATE[:BURST]");
  app.add_option("--dpu-agent-timeout-ms", [&c](const CLI::results_t& r) {
        c.dpu_agent_timeout_ns = std::stoull(r[0]) * 1'000'000;
        return true;
      }, "DPU mode: agent silence before HEADLESS (default 1000)");
  app.add_option("--table-capacity", c.table_capacity,
                 "Level-2 entries the table holds (default 65536 in DPU mode, twice --table's entries standalone);\n"
                 "about 224 bytes of worker memory per entry (two versions may be staged), and the agent mirrors\n"
                 "it in a shadow of about 64 bytes per entry. A PUT beyond it aborts the txn as table full.")
      ->check(CLI::Range(64u, 1u << 24));
  app.add_option("--dpu-max-protocol", c.dpu_max_protocol,
                 "DPU mode: newest channel protocol version to offer (default: the current one, 4). Rollout\n"
                 "drills: 2 behaves as the previous release (takes no vNIC entries, uses the YAML's vNICs), 3 takes\n"
                 "no partition keys");
  app.add_option("--insecure-table-hash-key", [&c](const CLI::results_t& r) {
        // K0:K1, 64-bit hex words. Tests only: see --help.
        const std::string& v = r[0];
        const auto colon = v.find(':');
        if (colon == std::string::npos) return false;
        try {
          std::size_t a = 0, b = 0;
          const uint64_t k0 = std::stoull(v.substr(0, colon), &a, 16);
          const uint64_t k1 = std::stoull(v.substr(colon + 1), &b, 16);
          if (a != colon || b != v.size() - colon - 1) return false;
          c.insecure_table_hash_key = tandem::rnic::TableHashKey{k0, k1};
        } catch (const std::exception&) {
          return false;
        }
        return true;
      }, "TESTS ONLY: K0:K1 (hex) as the level-2 table's hash secret instead of one drawn at start. A\n"
         "known secret lets a tenant choose overlay addresses whose entries fill another tenant's buckets\n"
         "(tests/system/adversary_test.py shows it); never use it in a deployment");
  app.add_option("--rxd", c.port.rx_desc, "RX ring size (default 512)");
  app.add_option("--txd", c.port.tx_desc, "TX ring size (default 512)");
  app.add_option("--link-wait-ms", c.port.link_wait_ms, "How long to wait for the link (default 2000)");
  app.add_flag("!--no-pdump", c.pdump, "Do not initialise rte_pdump (dpdk-dumpcap support)");
  std::string log_level = "info";
  tandem::common::log::add_level_option(app, log_level);

  try {
    app.parse(app_argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  tandem::common::log::init_from_flag("tandem-rnic", log_level);
  c.mode = mode == "gbn" ? tandem::rnic::Reliability::kGoBackN : tandem::rnic::Reliability::kIrn;
  c.idle.mode = idle == "adaptive" ? tandem::common::dpdk::IdleMode::kAdaptive : tandem::common::dpdk::IdleMode::kBusy;
  c.eal_args = std::move(eal_args);
  try {
    return rd::run(c);
  } catch (const std::exception& e) {
    tandem::common::log::error("{}", e.what());
    return 2;
  }
}
