// The file a process's trace ring lives in: <DPDK runtime dir of its file
// prefix>/tandem-trace.ring (tmpfs, so shared memory; removed with the
// runtime directory), created by the writer, mapped read-only by readers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/trace/trace_ring.h"

namespace tandem::common::trace {

inline constexpr const char* kRingFileName = "tandem-trace.ring";
inline constexpr uint64_t kDefaultCapacity = 16384;  // 640 KiB of records

class RingFile {
 public:
  // Creates (or truncates) `path` with a ring of `capacity` records.
  static RingFile create(const std::string& path, uint64_t capacity, int64_t clock_offset_ns,
                         const char* process);
  // Maps an existing ring read-only; throws std::runtime_error if it is not one.
  static RingFile open(const std::string& path);
  RingFile(RingFile&& o) noexcept : mem_(o.mem_), bytes_(o.bytes_) { o.mem_ = nullptr; }
  RingFile& operator=(RingFile&&) = delete;
  ~RingFile();
  RingHeader* header() const noexcept { return static_cast<RingHeader*>(mem_); }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  RingFile(void* mem, std::size_t bytes) : mem_(mem), bytes_(bytes) {}
  void* mem_;
  std::size_t bytes_;
};

// CLOCK_MONOTONIC_RAW minus `now_ns` of the caller's own clock read at the
// same moment: what a writer stores as its ring's clock_offset_ns.
int64_t monotonic_raw_offset(uint64_t now_ns);

}  // namespace tandem::common::trace
