#include "rnic/perf/sink_options.h"
#include "common/log/log_cli.h"

#include <arpa/inet.h>

#include <CLI/CLI.hpp>


namespace tandem::rnic::perf {

namespace {
bool is_ipv4(const std::string& s) {
  in_addr a{};
  return inet_pton(AF_INET, s.c_str(), &a) == 1;
}
}  // namespace

std::string finalize_sink_options(SinkOptions& o) {
  if (o.device.empty()) return "--device SOCK (the tandem-rnic worker's host socket) is required";
  if (o.table.empty()) return "--table FILE (the worker's --table YAML) is required";
  if (o.remote.empty() || !is_ipv4(o.remote)) return "--remote: the remote vNIC's overlay IPv4 is required";
  if (!o.gid.empty() && !is_ipv4(o.gid)) return "--gid: not an IPv4 address: " + o.gid;
  if (o.qps == 0 || o.qps > kSinkMaxQps) return "--qps: 1.." + std::to_string(kSinkMaxQps);
  if (o.size == 0 || o.size > (uint64_t{1} << 30) || o.size % 8 != 0)
    return "--size: a multiple of 8 bytes, up to 1 GiB";
  if (o.size * o.qps > (uint64_t{1} << 30)) return "--size x --qps: more than 1 GiB";
  if (o.recv_size == 0 || o.recv_size > (1u << 20)) return "--recv-size: 1..1048576";
  if (o.recv_depth == 0 || o.recv_depth > 1024) return "--recv-depth: 1..1024";
  if (o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096)
    return "--mtu: one of 256, 512, 1024, 2048, 4096";
  if (o.remote_qpn_base == 0 || o.remote_qpn_base + o.qps > 0xFFFFFF) return "--remote-qpn-base: QPNs must fit 24 bits";
  if (o.remote_psn > 0xFFFFFF) return "--remote-psn: 24 bits";
  if (o.duration_s < 0) return "--duration: must be positive";
  return "";
}

std::optional<SinkOptions> parse_sink_args(int argc, const char* const* argv, int* exit_code) {
  SinkOptions o;
  CLI::App app{
      "tandem-perf sink: receiving QPs for replayed traffic (pktgen, net_pcap). Creates --qps RC QPs on\n"
      "the worker, connects them to --remote (QPN base, first PSN), registers a buffer with remote write,\n"
      "keeps receives posted, prints the QPs' parameters (QPN, expected PSN, R_Key, VA, length, vNIC and\n"
      "peer addresses, the underlay addresses/MACs/UDP ports the worker expects) as JSON, and stays up\n"
      "until SIGINT/SIGTERM or --duration. Then it checks its memory against the pattern\n"
      "scripts/make_profiles.py --from writes and prints the verdict (JSON with --json).\n\n"
      "  tandem-perf sink -d /tmp/h0.rnic --table h0.yaml --remote 192.168.7.2 --qps 16 --json --out sink.json\n"
      "  scripts/make_profiles.py build/apps/tandem-wire/tandem-wire out/ --from sink.json\n\n"
      "Looped replays repeat PSNs: run the worker with --bench-any-psn (docs/pktgen.md).\n"
      "Exit: 0 ok, 1 memory check failed or the worker went away, 2 bad input or no worker."};
  app.set_help_flag("-h,--help", "Show this help and exit");
  app.add_option("-d,--device", o.device, "The tandem-rnic worker's host socket (Unix path)");
  app.add_option("--table", o.table, "The worker's --table YAML: its underlay address/MAC, vNICs and egress entries");
  app.add_option("-q,--qps", o.qps, "Receiving QPs (default 16, at most 1024)");
  app.add_option("--gid", o.gid, "This side's vNIC overlay IPv4 (default: the first vNIC with a route to --remote)");
  app.add_option("--remote", o.remote, "The remote vNIC's overlay IPv4: the GID every QP connects to (required)");
  app.add_option("--remote-qpn-base", o.remote_qpn_base, "Remote QPN of QP i is this + i (default 0x10000)");
  app.add_option("--remote-psn", o.remote_psn, "The remote's first PSN: every QP's expected PSN (default 0)");
  app.add_option("-s,--size", o.size, "WRITE target bytes per QP (default 65536, a multiple of 8)");
  app.add_option("--recv-size", o.recv_size, "Bytes per posted receive, for SEND streams (default 1024)");
  app.add_option("--recv-depth", o.recv_depth, "Receives kept posted per QP (default 64)");
  app.add_option("-m,--mtu", o.mtu, "Path MTU asked (default 1024; the worker caps it at its --mtu)");
  app.add_option("--mode", o.mode, "The worker's --mode, which profiles must follow: irn (XETH) or gbn")
      ->check(CLI::IsMember({"irn", "gbn"}));
  app.add_option("--out", o.out, "Also write the parameters JSON to this file (renamed into place when complete)");
  app.add_flag("--json", o.json, "JSON on stdout (parameters when ready, the verdict at exit)");
  app.add_option("-D,--duration", o.duration_s, "Stay up this many seconds (default: until SIGINT/SIGTERM)");
  app.add_flag("--huge", o.huge, "Put the buffer on huge pages (MFD_HUGETLB, falls back)");
  common::log::add_level_option(app, o.log_level);
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::CallForHelp& e) {
    *exit_code = app.exit(e);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    common::log::error("sink: {}", e.what());
    *exit_code = 2;
    return std::nullopt;
  }
  const std::string err = finalize_sink_options(o);
  if (!err.empty()) {
    common::log::error("sink: {}", err);
    *exit_code = 2;
    return std::nullopt;
  }
  *exit_code = 0;
  return o;
}

}  // namespace tandem::rnic::perf
