#include "rnic/perf/perf_options.h"
#include "common/log/log_cli.h"

#include <arpa/inet.h>

#include <CLI/CLI.hpp>

#include <vector>

namespace tandem::rnic::perf {

namespace {
struct TestEntry {
  TestKind kind;
  std::string_view name;
  std::string_view title;
};
constexpr TestEntry kTests[] = {
    {TestKind::kWriteBw, "write_bw", "RDMA_Write BW Test"},
    {TestKind::kSendBw, "send_bw", "Send BW Test"},
    {TestKind::kReadBw, "read_bw", "RDMA_Read BW Test"},
    {TestKind::kWriteLat, "write_lat", "RDMA_Write Latency Test"},
    {TestKind::kSendLat, "send_lat", "Send Latency Test"},
    {TestKind::kReadLat, "read_lat", "RDMA_Read Latency Test"},
};
}  // namespace

std::string_view test_name(TestKind t) noexcept {
  for (const auto& e : kTests)
    if (e.kind == t) return e.name;
  return "?";
}

std::string_view test_title(TestKind t) noexcept {
  for (const auto& e : kTests)
    if (e.kind == t) return e.title;
  return "?";
}

std::optional<TestKind> parse_test_name(std::string_view name) noexcept {
  for (const auto& e : kTests)
    if (e.name == name) return e.kind;
  return std::nullopt;
}

std::string finalize_options(Options& o) {
  bool lat = is_latency(o.test);
  if (o.device.empty()) return "--device SOCK (the tandem-rnic worker's host socket) is required";
  if (o.size == 0) o.size = lat ? 2 : 65536;
  if (o.size > kMaxSize) return "-s: message size above 1 GiB";
  if (o.iterations != 0 && o.duration_s > 0) return "-n and -D exclude each other";
  if (o.duration_s < 0) return "-D: duration must be positive";
  if (o.iterations == 0 && o.duration_s == 0) o.iterations = lat ? 1000 : 5000;
  if (o.qps == 0 || o.qps > kMaxQps) return "-q: QPs must be 1.." + std::to_string(kMaxQps);
  if (lat && o.qps != 1) return "-q: latency tests use one QP";
  if (o.tx_depth == 0) o.tx_depth = lat ? 1 : 128;
  if (o.tx_depth > kMaxTxDepth) return "-t: tx depth must be 1.." + std::to_string(kMaxTxDepth);
  if (o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096)
    return "--mtu: one of 256, 512, 1024, 2048, 4096";
  if (o.size * o.qps > kMaxBufferBytes) return "-s x -q: more than 256 MiB of buffer per side";
  if (!o.gid.empty()) {
    in_addr a{};
    if (inet_pton(AF_INET, o.gid.c_str(), &a) != 1) return "--gid: not an IPv4 address: " + o.gid;
  }
  if (o.timeout_s <= 0) return "--timeout: must be positive";
  return "";
}

std::optional<Options> parse_args(int argc, const char* const* argv, int* exit_code) {
  Options o;
  std::string test;
  std::vector<std::string> positional;
  CLI::App app{
      "tandem-perf: perftest for a Tandem RNIC. Run the same TEST on both sides: the server\n"
      "(no address) listens on -p, the client connects to it; they swap QP details (QPN, PSN,\n"
      "rkey, VA, overlay address) over that TCP connection, then move data through their\n"
      "tandem-rnic workers.\n\n"
      "  tandem-perf write_bw --device /run/tandem/rnic0.sock            # server\n"
      "  tandem-perf write_bw --device /run/tandem/rnic1.sock 127.0.0.1  # client\n\n"
      "Tests: write_bw send_bw read_bw write_lat send_lat read_lat. The client's -s/-n/-D/-q/-t/--mtu/\n"
      "--verify rule; the server takes them from the connection.\n"
      "Exit: 0 ok, 1 run failed (verify mismatch, error completion, peer gone), 2 bad input or\n"
      "no worker.\n\n"
      "tandem-perf sink --help: receiving QPs for pktgen / pcap replays (scripts/make_profiles.py --from)."};
  app.set_help_flag("-h,--help", "Show this help and exit");
  app.add_option("test", test, "write_bw | send_bw | read_bw | write_lat | send_lat | read_lat")->required();
  app.add_option("server", positional, "Server address (client side only)")->expected(0, 1);
  app.add_option("-d,--device", o.device, "The tandem-rnic worker's host socket (Unix path)");
  app.add_option("-p,--port", o.port, "TCP port of the QP exchange (default 18515)");
  app.add_option("-s,--size", o.size, "Message size in bytes (default 65536, latency 2)");
  app.add_option("-n,--iters", o.iterations, "Messages per QP (default 5000, latency 1000)");
  app.add_option("-D,--duration", o.duration_s, "Run for this many seconds instead of -n");
  app.add_option("-q,--qp", o.qps, "Number of QPs (default 1)");
  app.add_option("-t,--tx-depth", o.tx_depth, "Outstanding sends per QP (default 128, latency 1)");
  app.add_option("-m,--mtu", o.mtu, "Path MTU: 256..4096 (default 4096)");
  app.add_flag("--verify", o.verify,
               "Fill sources with a (qp, iteration, offset) pattern and check every byte received");
  app.add_option("--spray", o.spray, "Spraying policy to ask for (applied by the worker, see README)");
  app.add_option("--cc", o.cc, "Congestion-control policy to ask for (applied by the worker)");
  app.add_option("--gid", o.gid, "This side's vNIC overlay IPv4: binds tandem-perf to that vNIC of the worker "
                                 "(its tenant's routes only) and is sent to the peer as its GID "
                                 "(default: not bound, GID = the address of the TCP exchange)");
  app.add_flag("--json", o.json, "Print one JSON object instead of the table");
  app.add_flag("--huge", o.huge, "Put the buffers on huge pages (MFD_HUGETLB, falls back)");
  app.add_option("--timeout", o.timeout_s, "Fail after this many seconds without progress (default 10)");
  common::log::add_level_option(app, o.log_level);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    *exit_code = app.exit(e);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    common::log::error("{}", e.what());
    *exit_code = 2;
    return std::nullopt;
  }
  auto kind = parse_test_name(test);
  if (!kind) {
    common::log::error("unknown test '{}' (write_bw, send_bw, read_bw, write_lat, send_lat, read_lat)", test);
    *exit_code = 2;
    return std::nullopt;
  }
  o.test = *kind;
  if (!positional.empty()) o.server = positional[0];
  std::string err = finalize_options(o);
  if (!err.empty()) {
    common::log::error("{}", err);
    *exit_code = 2;
    return std::nullopt;
  }
  *exit_code = 0;
  return o;
}

}  // namespace tandem::rnic::perf
