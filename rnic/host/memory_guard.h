// Tenant memory can lose its pages under the worker: an application that
// punches a hole in its hugetlb memfd (FALLOC_FL_PUNCH_HOLE; seals cannot
// forbid it on memory both sides must write) leaves the worker's mapping to
// refault, and with no free huge page that fault is SIGBUS. MemoryGuard turns
// such a fault inside a region the worker mapped from an application into a
// recovered one: the faulting page is replaced by anonymous zero memory (the
// worker reads zeros, its writes reach no one) and counted; the application
// only harmed its own data. A SIGBUS anywhere else keeps its default action.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::rnic::host {

class MemoryGuard {
 public:
  // Installs the SIGBUS handler (once per process; later calls do nothing).
  static void install() noexcept;
  static bool installed() noexcept;
  // Guards [addr, addr + len), mapped in pages of `page` bytes (the huge page
  // size for hugetlbfs). False if the registry is full (the region is then
  // mapped unguarded, and counted). Any thread but a signal handler.
  static bool add(const void* addr, std::size_t len, std::size_t page) noexcept;
  static void remove(const void* addr) noexcept;
  // Faults recovered so far, and regions that found no registry slot.
  static uint64_t recovered() noexcept;
  static uint64_t unguarded() noexcept;
  static std::size_t guarded() noexcept;  // regions guarded now
};

}  // namespace tandem::rnic::host
