// A bounded single-producer / single-consumer queue between two threads of
// one process (the host interface's control thread and the data lcore), in
// the manner of SPDK's spdk_thread_send_msg ring: the consumer never blocks
// and pays one acquire load when the queue is empty. T is copied in and out.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tandem::rnic::host {

template <typename T, std::size_t N>
class SpscQueue {
  static_assert((N & (N - 1)) == 0, "N must be a power of two");

 public:
  // Producer side. False when full.
  bool push(const T& v) noexcept {
    const uint64_t h = head_.load(std::memory_order_relaxed);
    if (h - tail_cache_ == N) {
      tail_cache_ = tail_.load(std::memory_order_acquire);
      if (h - tail_cache_ == N) return false;
    }
    slots_[h & (N - 1)] = v;
    head_.store(h + 1, std::memory_order_release);
    return true;
  }

  // Consumer side. False when empty.
  bool pop(T* out) noexcept {
    const uint64_t t = tail_.load(std::memory_order_relaxed);
    if (t == head_cache_) {
      head_cache_ = head_.load(std::memory_order_acquire);
      if (t == head_cache_) return false;
    }
    *out = slots_[t & (N - 1)];
    tail_.store(t + 1, std::memory_order_release);
    return true;
  }

 private:
  alignas(64) std::atomic<uint64_t> head_{0};  // written by the producer
  uint64_t tail_cache_ = 0;                    // producer's view of tail_
  alignas(64) std::atomic<uint64_t> tail_{0};  // written by the consumer
  uint64_t head_cache_ = 0;                    // consumer's view of head_
  alignas(64) T slots_[N];
};

}  // namespace tandem::rnic::host
