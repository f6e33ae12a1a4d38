// What a tandem-perf run prints: perftest's table (or one JSON object with
// --json), built from a RunReport so both forms say the same thing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "rnic/perf/perf_options.h"
#include "rnic/perf/perf_stats.h"

namespace tandem::rnic::perf {

struct Mismatch {
  uint32_t qp;         // QP index (0..qps-1)
  uint64_t iteration;  // message number on that QP (read_bw: the slot the pattern is keyed by)
  uint64_t offset;     // first wrong byte in the message
  uint8_t expected;
  uint8_t got;
};

struct RunReport {
  Options options;         // after finalize_options (the server's: as agreed with the client)
  std::string role;        // "server" | "client"
  uint64_t iterations = 0; // messages per QP (the largest count when they differ)
  uint64_t messages = 0;   // over all QPs
  bool have_bw = false;
  double bw_peak_gbps = 0, bw_avg_gbps = 0, msg_rate_mpps = 0;
  bool have_latency = false;
  LatencySummary latency;
  std::string verify = "off";             // "ok" | "failed" | "off": this side's checks
  std::optional<Mismatch> mismatch;       // the first one
  std::string peer_verify;                // the server's verdict, as the client heard it
  uint64_t errors = 0;                    // error completions + mismatching messages
  std::string error;                      // the first error, "" if none
};

std::string format_mismatch(const Mismatch& m);
// perftest-like output: the header block (printed before the run), the
// result block (after it), and both together.
std::string format_header(const RunReport& r);
std::string format_results(const RunReport& r);
std::string format_table(const RunReport& r);
// One JSON object on one line.
std::string format_json(const RunReport& r);

}  // namespace tandem::rnic::perf
