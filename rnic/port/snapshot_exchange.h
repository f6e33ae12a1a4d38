// Hands a copy of fast-path state to other threads without letting them touch
// it: a reader asks (request), the data lcore sees the ask on its next loop
// iteration (wanted), fills the one buffer and publishes it; the reader copies
// it out once ready. The lcore writes only when asked, so an idle observer
// costs one relaxed load per iteration, and objects the lcore frees (QPs,
// policies) are never read by the telemetry threads.
//
// Readers are serialised by a mutex that only readers take; while a reader
// holds it no new request exists, so the lcore cannot rewrite the buffer under
// it. A reader that gives up (the lcore stalled) drops its request; the next
// one waits for its own, newer publication. No clock here: the waiting (and
// its timeout) belongs to the caller.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace tandem::rnic::port {

template <class T>
class SnapshotExchange {
 public:
  // --- data lcore ---
  bool wanted() const noexcept {
    return requested_.load(std::memory_order_acquire) != published_.load(std::memory_order_relaxed);
  }
  T& buffer() noexcept { return data_; }
  // After filling buffer(): the request seen by wanted() is answered.
  void publish() noexcept {
    published_.store(requested_.load(std::memory_order_acquire), std::memory_order_release);
  }

  // --- readers (any other thread) ---
  class Reader {
   public:
    explicit Reader(SnapshotExchange& x) : x_(x), lock_(x.readers_mu_) {
      ticket_ = x_.requested_.fetch_add(1, std::memory_order_acq_rel) + 1;
    }
    bool ready() const noexcept { return x_.published_.load(std::memory_order_acquire) >= ticket_; }
    // Valid only once ready(), until the Reader goes away.
    const T& data() const noexcept { return x_.data_; }

   private:
    SnapshotExchange& x_;
    std::lock_guard<std::mutex> lock_;
    uint64_t ticket_ = 0;
  };

 private:
  T data_{};
  std::mutex readers_mu_;
  alignas(64) std::atomic<uint64_t> requested_{0};
  alignas(64) std::atomic<uint64_t> published_{0};
};

}  // namespace tandem::rnic::port
