// Reads classic pcap files of Ethernet frames without libpcap: either byte
// order, microsecond or nanosecond timestamps. The whole file is held in
// memory (captures here are small), so the parser also works on a buffer,
// which is what the fuzzer feeds it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/pcap/pcap_error.h"
#include "common/pcap/pcap_format.h"

namespace tandem::common {

struct PcapRecord {
  uint64_t ts_ns = 0;        // capture time, nanoseconds since the epoch
  uint32_t orig_len = 0;     // length on the wire
  std::span<const uint8_t> data;  // captured bytes (orig_len or fewer)
};

class PcapReader {
 public:
  // Parses the global header of `bytes`, which must outlive the reader.
  // `name` is used in error messages. Throws PcapError.
  PcapReader(std::span<const uint8_t> bytes, std::string name);

  // Next record, or false at a clean end of file. Throws PcapError on a
  // truncated or impossible record.
  bool next(PcapRecord& rec);

  bool nanosecond() const noexcept { return nano_; }
  bool swapped() const noexcept { return swapped_; }
  uint32_t linktype() const noexcept { return linktype_; }
  uint32_t snaplen() const noexcept { return snaplen_; }
  std::size_t records_read() const noexcept { return index_; }

 private:
  uint32_t u32(std::size_t off) const noexcept;

  std::span<const uint8_t> bytes_;
  std::string name_;
  std::size_t off_ = kPcapFileHeaderLen;
  std::size_t index_ = 0;
  bool swapped_ = false;
  bool nano_ = false;
  uint32_t linktype_ = 0;
  uint32_t snaplen_ = 0;
};

// A pcap file read into memory, with a reader over it.
class PcapFile {
 public:
  // Throws PcapError("PATH: cannot open: ...") and whatever PcapReader throws.
  explicit PcapFile(const std::string& path);
  PcapFile(const PcapFile&) = delete;  // the reader points into bytes_
  PcapFile& operator=(const PcapFile&) = delete;
  PcapReader& reader() noexcept { return reader_; }

 private:
  static std::vector<uint8_t> load(const std::string& path);
  std::vector<uint8_t> bytes_;
  PcapReader reader_;
};

}  // namespace tandem::common
