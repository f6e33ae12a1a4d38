// The munmap that waits for the data path (unmap_guard.h).
#include "common/dpdk/unmap_guard.h"

#include <dlfcn.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>

namespace tandem::common::dpdk {

namespace unmap_guard_detail {
Epoch epochs[kMaxDataPaths];
std::atomic<unsigned> n_data_paths{0};
thread_local Epoch* epoch = &epochs[0];
bool data_path_fence = true;
thread_local bool on_data_path = false;
}  // namespace unmap_guard_detail

namespace {
bool g_membarrier = false;
std::atomic<uint64_t> g_unmaps{0}, g_waited{0}, g_wait_ns_max{0}, g_timeouts{0};

uint64_t mono_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

void wait_for_data_path() noexcept {
  using namespace unmap_guard_detail;
  if (on_data_path) return;  // our own thread: it is not inside a burst while it unmaps
  g_unmaps.fetch_add(1, std::memory_order_relaxed);
  // Orders the caller's earlier stores (the PMD's cleared flag) before the
  // load of the epoch, against the data path's epoch store and flag load.
  if (g_membarrier) syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  else std::atomic_thread_fence(std::memory_order_seq_cst);
  const unsigned n = std::min(n_data_paths.load(std::memory_order_acquire), kMaxDataPaths);
  uint64_t waited = 0;
  bool any = false;
  const uint64_t t0 = mono_ns();
  for (unsigned i = 0; i < std::max(n, 1u); ++i) {
    const uint64_t e = epochs[i].v.load(std::memory_order_acquire);
    if ((e & 1) == 0) continue;
    if (!any) g_waited.fetch_add(1, std::memory_order_relaxed);
    any = true;
    while (epochs[i].v.load(std::memory_order_acquire) == e) {
      waited = mono_ns() - t0;
      if (waited > 1'000'000'000u) {
        g_timeouts.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      sched_yield();
    }
  }
  if (!any) return;
  uint64_t m = g_wait_ns_max.load(std::memory_order_relaxed);
  while (waited > m && !g_wait_ns_max.compare_exchange_weak(m, waited, std::memory_order_relaxed)) {
  }
}
}  // namespace

void unmap_guard_init() noexcept {
  using namespace unmap_guard_detail;
  on_data_path = true;
  const unsigned slot = n_data_paths.fetch_add(1, std::memory_order_acq_rel);
  epoch = &epochs[std::min(slot, kMaxDataPaths - 1)];
  g_membarrier = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  data_path_fence = !g_membarrier;
}

UnmapGuardStats unmap_guard_stats() noexcept {
  return {g_unmaps.load(std::memory_order_relaxed), g_waited.load(std::memory_order_relaxed),
          g_wait_ns_max.load(std::memory_order_relaxed), g_timeouts.load(std::memory_order_relaxed)};
}

bool unmap_guard_active() noexcept {
  return dlsym(RTLD_DEFAULT, "munmap") == reinterpret_cast<void*>(&::munmap);
}

}  // namespace tandem::common::dpdk

// Interposes libc's munmap for the whole process (see unmap_guard.h).
extern "C" int munmap(void* addr, std::size_t len) noexcept {
  tandem::common::dpdk::wait_for_data_path();
  return static_cast<int>(syscall(SYS_munmap, addr, len));
}
