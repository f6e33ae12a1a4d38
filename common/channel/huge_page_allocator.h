// An allocator for the big flat tables on both ends of the channel (the RNIC's
// level-2 table, the agent's shadow, level 1's mappings): blocks of 2 MiB or
// more are mapped 2 MiB-aligned and advised for transparent huge pages, so a
// random lookup in a table of hundreds of MiB costs a cache miss but not also
// a TLB miss and page walk (with 4 KiB pages nearly every new-flow lookup
// took both), and growing the table faults once per 2 MiB instead of once per
// 4 KiB. Smaller blocks come from operator new. Without THP (or if the kernel
// has no huge page to give) the advice is ignored: ordinary pages, same
// behaviour. Memory allocation only; no I/O.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>

namespace tandem::common {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// Maps `bytes` (rounded up to 2 MiB) 2 MiB-aligned, zero-filled, advised
// MADV_HUGEPAGE. Throws std::bad_alloc if the kernel refuses.
inline void* map_huge(std::size_t bytes) {
  const std::size_t len = (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  // Over-map by one huge page and trim, so the block starts on a 2 MiB boundary
  // (THP needs aligned 2 MiB ranges).
  void* raw = ::mmap(nullptr, len + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePageBytes - 1) & ~(std::uintptr_t{kHugePageBytes} - 1);
  if (aligned > start) ::munmap(raw, aligned - start);
  const std::uintptr_t end = start + len + kHugePageBytes;
  if (end > aligned + len) ::munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
  ::madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);  // advice: failure leaves 4 KiB pages
  return reinterpret_cast<void*>(aligned);
}

inline void unmap_huge(void* p, std::size_t bytes) noexcept {
  ::munmap(p, (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1));
}

template <class T>
struct HugePageAllocator {
  using value_type = T;

  HugePageAllocator() noexcept = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes >= kHugePageBytes) return static_cast<T*>(map_huge(bytes));
    return static_cast<T*>(::operator new(bytes, std::align_val_t{alignof(T)}));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (bytes >= kHugePageBytes)
      unmap_huge(p, bytes);
    else
      ::operator delete(p, std::align_val_t{alignof(T)});
  }

  template <class U>
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator<U>&) noexcept {
    return true;
  }
};

}  // namespace tandem::common
