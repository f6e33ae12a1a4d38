// Closes DPDK 22.11 memif's unmap race from outside the PMD. When a memif
// peer goes away, the PMD clears its CONNECTED flag and then, on the EAL
// interrupt thread, munmaps the shared regions, with no handshake with a
// burst on the data-path thread that already passed the flag check: that
// burst then touches unmapped memory (SIGSEGV; common/fabric/dpdk/MEMIF.md).
//
// The process defines munmap itself (symbol interposition: the PMD's call
// binds to the executable's definition, which must be exported; meson adds
// -Wl,--export-dynamic-symbol=munmap). The data-path thread brackets each
// round of port polling (its rx and tx bursts) with a PortSection; munmap
// called on any other thread waits until the data path is outside the
// section it was in, then unmaps. A burst that starts later sees the cleared
// flag and does not touch the regions: the waiter and the data path each
// order their store before their load with a fence (membarrier() on the
// waiter's side when the kernel has it, so the data path pays only a store).
// Up to kMaxDataPaths data-path threads per process (tandem-rnic --lcores):
// each has its own epoch; munmap waits for every one inside a section. An executable that links common/dpdk
// and calls munmap itself gets this munmap too (the archive member resolves
// it); with no PortSection it only adds a fence.
//
// Why here and not in the PMD: the packaged DPDK is used as is, and memif is
// the lab's inter-process link (memif_unmap_guard_test: a server polling
// without the guard died with SIGSEGV within 5-6 killed clients, twice; with
// it, 25 of 25).
#pragma once

#include <atomic>
#include <cstdint>

namespace tandem::common::dpdk {

inline constexpr unsigned kMaxDataPaths = 16;
namespace unmap_guard_detail {
struct alignas(64) Epoch {
  std::atomic<uint64_t> v{0};  // odd: that data path is inside a section
};
extern Epoch epochs[kMaxDataPaths];
extern std::atomic<unsigned> n_data_paths;
extern thread_local Epoch* epoch;  // this thread's (slot 0 until unmap_guard_init)
extern bool data_path_fence;         // membarrier unavailable: fence on enter
extern thread_local bool on_data_path;
}  // namespace unmap_guard_detail

// Call once on each data-path thread before its loop (takes it an epoch,
// registers membarrier). More than kMaxDataPaths: they share the last one.
void unmap_guard_init() noexcept;
// Call on a thread whose munmaps never touch the port's regions (their memory
// has its own grace period, e.g. the RNIC's host control thread): its munmap
// then neither waits for the data path nor interrupts it with a membarrier.
inline void unmap_guard_exempt_this_thread() noexcept { unmap_guard_detail::on_data_path = true; }

class PortSection {
 public:
  PortSection() noexcept {
    using namespace unmap_guard_detail;
    epoch->v.store(epoch->v.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (data_path_fence) std::atomic_thread_fence(std::memory_order_seq_cst);
    else std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  ~PortSection() { leave(); }
  // Ends the section early (before the loop's idle sleep, say).
  void leave() noexcept {
    using namespace unmap_guard_detail;
    if (!inside_) return;
    inside_ = false;
    epoch->v.store(epoch->v.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  PortSection(const PortSection&) = delete;
  PortSection& operator=(const PortSection&) = delete;

 private:
  bool inside_ = true;
};

struct UnmapGuardStats {
  uint64_t unmaps = 0;        // munmap calls off the data path
  uint64_t waited = 0;        // of which found the data path inside a section
  uint64_t wait_ns_max = 0;
  uint64_t timeouts = 0;      // gave up waiting (data path stuck for 1 s)
};
UnmapGuardStats unmap_guard_stats() noexcept;
// Whether this process's munmap, as shared libraries resolve it, is ours
// (false: the executable does not export it, the race stays open).
bool unmap_guard_active() noexcept;

}  // namespace tandem::common::dpdk
