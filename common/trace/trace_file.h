// The file a process's trace ring lives in: <DPDK runtime dir of its file
// prefix>/tandem-trace.ring (tmpfs, so shared memory; removed with the
// runtime directory), created by the writer, mapped read-only by readers. A
// process whose lcores each trace (tandem-rnic --lcores N) has one ring per
// lcore, each with one writer: lcore k > 0's is tandem-trace.lcore<k>.ring
// beside lcore 0's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/trace/trace_merge.h"
#include "common/trace/trace_ring.h"

namespace tandem::common::trace {

inline constexpr const char* kRingFileName = "tandem-trace.ring";
inline constexpr uint64_t kDefaultCapacity = 32768;  // 1.25 MiB of records

// Lcore k's ring file name (kRingFileName for lcore 0).
std::string lcore_ring_name(uint32_t lcore);
// A process's rings: `first` (a ring path) and, if it is named kRingFileName,
// the lcore rings beside it, in lcore order.
std::vector<std::string> process_rings(const std::string& first);

class RingFile {
 public:
  // Creates (or truncates) `path` with a ring of `capacity` records.
  static RingFile create(const std::string& path, uint64_t capacity, int64_t clock_offset_ns,
                         const char* process, uint64_t tsc_base = 0, uint64_t tsc_mult = 0);
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

// The TSC against CLOCK_MONOTONIC_RAW, measured by the reader over `ms`
// (merge() converts every TSC writer's records with it).
TscCalibration calibrate_tsc(unsigned ms = 20);

}  // namespace tandem::common::trace
