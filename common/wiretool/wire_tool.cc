#include "common/wiretool/wire_tool.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <ostream>
#include <vector>

#include "common/pcap/pcap_reader.h"
#include "common/pcap/pcap_writer.h"
#include "common/wiretool/frame_decoder.h"
#include "common/wiretool/frame_encoder.h"

namespace tandem::common {

namespace {

// Encoded packets are stamped 1 us apart from a fixed start, so the same
// spec always gives the same file.
constexpr uint64_t kEncodeStartNs = 1'700'000'000ull * 1'000'000'000ull;
constexpr uint64_t kEncodeStepNs = 1'000;

}  // namespace

void run_decode(const WireToolConfig& cfg, std::ostream& out) {
  PcapFile file(cfg.input);
  DecodeOptions opts;
  opts.payload_hex = cfg.payload;
  PcapRecord rec;
  while (file.reader().next(rec)) {
    const Json pkt = decode_frame(rec.data, file.reader().records_read(), opts);
    if (cfg.summary) {
      out << summarize_packet(pkt) << '\n';
    } else {
      out << pkt.dump() << '\n';
    }
  }
  out.flush();
}

std::size_t run_encode(const WireToolConfig& cfg) {
  std::ifstream in(cfg.input);
  if (!in) throw PcapError(cfg.input + ": cannot open: " + std::strerror(errno));
  // Build every frame first, so a bad spec leaves no half-written pcap.
  std::vector<std::vector<uint8_t>> frames;
  std::string line;
  for (std::size_t lineno = 1; std::getline(in, line); ++lineno) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::string where = cfg.input + ":" + std::to_string(lineno) + ": ";
    Json spec;
    try {
      spec = Json::parse(line);
    } catch (const Json::parse_error& e) {
      std::string what = e.what();
      if (auto p = what.find("syntax error"); p != std::string::npos) what = what.substr(p);
      throw SpecError(where + "bad JSON: " + what);
    }
    try {
      frames.push_back(encode_frame(spec));
    } catch (const SpecError& e) {
      throw SpecError(where + e.what());
    }
  }
  if (in.bad()) throw PcapError(cfg.input + ": read error");
  PcapWriter w(cfg.output, cfg.nanosecond);
  uint64_t ts = kEncodeStartNs;
  for (const auto& f : frames) {
    w.write(ts, f);
    ts += kEncodeStepNs;
  }
  w.close();
  return frames.size();
}

int run(const WireToolConfig& cfg, std::ostream& out, std::ostream& err) {
  try {
    if (cfg.command == "decode") {
      run_decode(cfg, out);
    } else if (cfg.command == "encode") {
      const std::size_t n = run_encode(cfg);
      out << "wrote " << n << " packet" << (n == 1 ? "" : "s") << " to " << cfg.output << '\n';
    } else {
      err << "tandem-wire: unknown command '" << cfg.command << "' (decode or encode)\n";
      return kExitBadInput;
    }
  } catch (const std::exception& e) {
    out.flush();
    err << "tandem-wire: " << e.what() << '\n';
    return kExitBadInput;
  }
  return 0;
}

}  // namespace tandem::common
