// What `tandem-perf sink` does: N receiving QPs on a worker, connected to a
// stated remote (overlay address, QPN base, PSN), whose parameters it prints
// as JSON for scripts/make_profiles.py --from (pktgen / pcap replay profiles).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tandem::rnic::perf {

inline constexpr uint32_t kSinkMaxQps = 1024;

struct SinkOptions {
  std::string device;          // the tandem-rnic worker's host socket
  std::string table;           // the worker's --table YAML (its underlay addresses, as it expects them)
  uint32_t qps = 16;
  std::string gid;             // this side's vNIC overlay IPv4 ("": the first vNIC routed to remote)
  std::string remote;          // the remote vNIC's overlay IPv4 (the GID the QPs connect to)
  uint32_t remote_qpn_base = 0x10000;  // remote QPN of QP i: base + i
  uint32_t remote_psn = 0;     // the remote's first PSN = each QP's expected PSN
  uint64_t size = 65536;       // WRITE target bytes per QP
  uint32_t recv_size = 1024;   // bytes per posted receive (SEND streams)
  uint32_t recv_depth = 64;    // receives kept posted per QP
  uint32_t mtu = 1024;         // path MTU asked (the worker caps it at its --mtu)
  std::string mode = "irn";    // the worker's --mode: what the profiles must carry
  std::string out;             // also write the parameters JSON here (atomically)
  bool json = false;
  double duration_s = 0;       // 0: until SIGINT/SIGTERM
  bool huge = false;
  std::string log_level = "info";  // --log-level (common/log)
};

// `tandem-perf sink ...` (argv[1] == "sink"). nullopt with *exit_code: 0 after
// --help, 2 on bad input (one line on stderr).
std::optional<SinkOptions> parse_sink_args(int argc, const char* const* argv, int* exit_code);
std::string finalize_sink_options(SinkOptions& o);

}  // namespace tandem::rnic::perf
