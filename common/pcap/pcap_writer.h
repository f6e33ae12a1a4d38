// Writes classic pcap files of Ethernet frames (little-endian, microsecond
// or nanosecond timestamps), readable by tshark, tcpreplay and scapy.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "common/pcap/pcap_error.h"
#include "common/pcap/pcap_format.h"

namespace tandem::common {

class PcapWriter {
 public:
  // Creates (truncates) `path` and writes the global header. Throws PcapError.
  explicit PcapWriter(const std::string& path, bool nanosecond = false,
                      uint32_t snaplen = kPcapDefaultSnaplen);
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  // Appends one frame captured at `ts_ns`; `orig_len` 0 means frame.size().
  // Frames longer than the snaplen are cut to it, as a capture would.
  void write(uint64_t ts_ns, std::span<const uint8_t> frame, uint32_t orig_len = 0);

  // Flushes and closes; throws PcapError if the data could not be written.
  void close();

  std::size_t records_written() const noexcept { return count_; }

 private:
  void put(const void* p, std::size_t n);

  std::string path_;
  FILE* f_ = nullptr;
  bool nano_;
  uint32_t snaplen_;
  std::size_t count_ = 0;
};

}  // namespace tandem::common
