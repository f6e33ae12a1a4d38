// A host's registered memory in the simulator: one anonymous mapping,
// reserved but not committed (MAP_NORESERVE), so a workload of many large
// flows costs only the pages its messages in flight touch; a connection
// whose messages are all done gives its pages back (release), and the
// resident set follows what is in flight, not what the run ever sent.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>

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

}  // namespace tandem::rnic::sim
