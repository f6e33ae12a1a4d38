// The `tandem-wire` commands behind apps/tandem-wire/main.cc: decode a pcap
// to JSON lines, encode JSON lines to a pcap.
#pragma once

#include <iosfwd>
#include <string>

namespace tandem::common {

struct WireToolConfig {
  std::string command;     // "decode" or "encode"
  std::string input;       // decode: the pcap; encode: the JSONL spec
  std::string output;      // encode: the pcap to write
  bool summary = false;    // decode: one readable line per packet instead of JSON
  bool payload = false;    // decode: include payload_hex
  bool nanosecond = false; // encode: nanosecond pcap timestamps
};

inline constexpr int kExitBadInput = 2;

// Runs one command. Returns 0, or kExitBadInput after writing one error line
// ("tandem-wire: FILE[:LINE]: what") to `err`. Never throws.
int run(const WireToolConfig& cfg, std::ostream& out, std::ostream& err);

// The two commands; they throw WireToolError (message names file and line).
void run_decode(const WireToolConfig& cfg, std::ostream& out);
std::size_t run_encode(const WireToolConfig& cfg);

}  // namespace tandem::common
