// What a tandem-perf run does: the test, its sizes and counts, the peer, the
// worker socket. Filled from the command line (perftest's flag names) and
// checked before anything is attached or connected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::rnic::perf {

enum class TestKind : uint8_t { kWriteBw, kSendBw, kReadBw, kWriteLat, kSendLat, kReadLat };

std::string_view test_name(TestKind t) noexcept;       // "write_bw", ...
std::string_view test_title(TestKind t) noexcept;      // "RDMA_Write BW Test", ...
std::optional<TestKind> parse_test_name(std::string_view name) noexcept;
constexpr bool is_latency(TestKind t) noexcept {
  return t == TestKind::kWriteLat || t == TestKind::kSendLat || t == TestKind::kReadLat;
}

inline constexpr uint16_t kDefaultPort = 18515;            // perftest's default
inline constexpr uint32_t kMaxQps = 256;
inline constexpr uint32_t kMaxTxDepth = 4096;
inline constexpr uint64_t kMaxSize = uint64_t{1} << 30;    // one WQE carries < 4 GiB
// Buffer bytes per side; the number of message slots per QP shrinks to fit.
inline constexpr uint64_t kMaxBufferBytes = uint64_t{256} << 20;

struct Options {
  TestKind test = TestKind::kWriteBw;
  std::string device;          // the tandem-rnic worker's host socket
  std::string server;          // empty: this side is the server
  uint16_t port = kDefaultPort;
  uint64_t size = 0;           // bytes per message (0: perftest default for the test)
  uint64_t iterations = 0;     // messages per QP (0: default, or run for duration_s)
  double duration_s = 0;       // -D: run this long instead of a message count
  uint32_t qps = 1;
  uint32_t tx_depth = 0;       // outstanding sends per QP (0: default for the test)
  uint32_t mtu = 4096;         // path MTU given to modify_qp
  bool verify = false;
  std::string spray;           // spraying policy wanted (worker-side, see README)
  std::string cc;              // congestion-control policy wanted (worker-side)
  std::string gid;             // this side's vNIC overlay IPv4 (the GID the peer addresses)
  bool json = false;
  bool huge = false;           // buffers on huge pages (alloc_buf MFD_HUGETLB)
  double timeout_s = 10;       // no progress for this long -> error
  std::string log_level = "info";  // --log-level (common/log)
  bool is_server() const noexcept { return server.empty(); }
};

// Parses argv (perftest-style: `tandem-perf TEST --device SOCK [-flags] [SERVER]`).
// Returns the options, or nullopt with *exit_code set: 0 after --help, 2 on
// bad input (one line on stderr already printed).
std::optional<Options> parse_args(int argc, const char* const* argv, int* exit_code);

// Fills defaults and checks ranges and combinations; returns an error message
// or "" if the options are usable.
std::string finalize_options(Options& o);

}  // namespace tandem::rnic::perf
