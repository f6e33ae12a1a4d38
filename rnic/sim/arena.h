// A host's registered memory in the simulator: one anonymous mapping,
// reserved but not committed (MAP_NORESERVE), so a workload of many large
// flows costs only the pages its messages in flight touch. Open-loop flows
// take their slots when they start and give them back when done (Slots:
// power-of-two classes, reused warm, no page faults in steady state); a
// closed-loop connection's fixed slots can be released to the kernel.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace tandem::rnic::sim {

class Arena {
 public:
  Arena() = default;
  explicit Arena(uint64_t size) : size_(size ? size : 1) {
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<uint8_t*>(p);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&& o) noexcept : base_(o.base_), size_(o.size_) { o.base_ = nullptr; }
  Arena& operator=(Arena&& o) noexcept {
    std::swap(base_, o.base_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~Arena() {
    if (base_ != nullptr) munmap(base_, size_);
  }

  uint8_t* get() const noexcept { return base_; }
  uint64_t size() const noexcept { return size_; }

  // Drops the whole pages inside [off, off + len): they read as zeros again
  // and no longer count as resident.
  void release(uint64_t off, uint64_t len) noexcept {
    constexpr uint64_t kPage = 4096;
    const uint64_t a = (off + kPage - 1) & ~(kPage - 1);
    const uint64_t b = (off + len) & ~(kPage - 1);
    if (base_ != nullptr && b > a) madvise(base_ + a, b - a, MADV_DONTNEED);
  }

 private:
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
};

// Slot allocation inside an arena: blocks of a power of two (>= 4 KiB)
// bytes, each class with its own free list, new blocks from a bump pointer
// (aligned to their size up to 2 MiB, so a freed large block can go back to
// the kernel as whole huge pages). At most twice the bytes asked for are in
// use.
class Slots {
 public:
  static constexpr uint64_t kHuge = 2u << 20;
  static uint64_t block(uint64_t bytes) noexcept {
    uint64_t b = 4096;
    while (b < bytes) b <<= 1;
    return b;
  }
  // The address space an arena needs for a block of this size (its alignment).
  static uint64_t reserve(uint64_t bytes) noexcept {
    const uint64_t b = block(bytes);
    return b + (b < kHuge ? b : kHuge);
  }
  uint64_t alloc(uint64_t bytes) {
    const uint64_t b = block(bytes);
    const unsigned c = static_cast<unsigned>(__builtin_ctzll(b));
    if (free_.size() <= c) free_.resize(c + 1);
    if (!free_[c].empty()) {
      const uint64_t off = free_[c].back();
      free_[c].pop_back();
      return off;
    }
    const uint64_t align = b < kHuge ? b : kHuge;
    const uint64_t off = (top_ + align - 1) & ~(align - 1);
    top_ = off + b;
    return off;
  }
  void free(uint64_t off, uint64_t bytes) {
    const unsigned c = static_cast<unsigned>(__builtin_ctzll(block(bytes)));
    if (free_.size() <= c) free_.resize(c + 1);
    free_[c].push_back(off);
  }
  uint64_t high_water() const noexcept { return top_; }

 private:
  std::vector<std::vector<uint64_t>> free_;
  uint64_t top_ = 0;
};

}  // namespace tandem::rnic::sim
