// Per-vNIC budgets for the worker's punts to the DPU agent: a token bucket
// per vNIC (rate per second, burst), checked before a punt takes a channel
// slot, so one tenant's storm of misses cannot crowd the others' new-flow
// setup out of the slots or the agent's queue. Sans-I/O: the caller passes
// `now`. One writer (the data lcore); the counters are atomics any thread may
// read, in a fixed table that is never freed.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

namespace tandem::rnic::port {

struct PuntBudgetConfig {
  uint64_t rate_per_s = 1000;  // punts a vNIC may make per second, sustained; 0: no budget (all admitted)
  uint32_t burst = 128;        // and at once, after a quiet spell
};

class PuntBudget {
 public:
  using Config = PuntBudgetConfig;
  // vNICs with a bucket of their own; more share the last one (counted there as vnic_id UINT32_MAX).
  static constexpr std::size_t kBuckets = 256;
  static constexpr uint32_t kOverflowId = UINT32_MAX;

  explicit PuntBudget(Config c = {}) noexcept
      : cfg_(c),
        cost_ns_(c.rate_per_s == 0 ? 0 : std::max<uint64_t>(1'000'000'000 / c.rate_per_s, 1)),
        depth_ns_(cost_ns_ * std::max<uint32_t>(c.burst, 1)) {}

  // A punt of vNIC `vnic_id` at `now_ns`: true if its bucket has a token (taken),
  // false if not (the punt is refused and counted for the vNIC).
  bool admit(uint32_t vnic_id, uint64_t now_ns) noexcept { return admit_at(index_of(vnic_id, now_ns), now_ns); }

  // The vNIC's bucket (made on first use), < kBuckets: callers may keep state
  // per vNIC beside it (DpuLink's recent punts, so one vNIC's many keys only
  // ever evict its own).
  uint32_t index_of(uint32_t vnic_id, uint64_t now_ns) noexcept {
    return static_cast<uint32_t>(&bucket(vnic_id, now_ns) - buckets_.data());
  }
  // admit() for a bucket index_of() gave.
  bool admit_at(uint32_t index, uint64_t now_ns) noexcept {
    Bucket& b = buckets_[index % kBuckets];
    if (cost_ns_ != 0) {
      // Credit is time: a token costs cost_ns_, the bucket holds depth_ns_.
      const uint64_t since = now_ns >= b.last_ns ? now_ns - b.last_ns : 0;
      b.credit_ns = std::min(depth_ns_, b.credit_ns + std::min(since, depth_ns_));
      b.last_ns = now_ns;
      if (b.credit_ns < cost_ns_) {
        bump(b.refused);
        return false;
      }
      b.credit_ns -= cost_ns_;
    }
    bump(b.admitted);
    return true;
  }

  struct Row {
    uint32_t vnic_id = 0;
    uint64_t admitted = 0;
    uint64_t refused = 0;
  };
  // The vNICs that punted, in no particular order: any thread.
  std::size_t rows(std::span<Row> out) const noexcept {
    std::size_t n = 0;
    for (const Bucket& b : buckets_) {
      if (n == out.size()) break;
      if (!b.used.load(std::memory_order_acquire)) continue;
      out[n++] = Row{b.vnic_id.load(std::memory_order_relaxed), b.admitted.load(std::memory_order_relaxed),
                     b.refused.load(std::memory_order_relaxed)};
    }
    return n;
  }
  uint64_t refused_total() const noexcept {
    uint64_t t = 0;
    for (const Bucket& b : buckets_) t += b.refused.load(std::memory_order_relaxed);
    return t;
  }
  const Config& config() const noexcept { return cfg_; }

 private:
  struct Bucket {
    std::atomic<bool> used{false};
    std::atomic<uint32_t> vnic_id{0};
    std::atomic<uint64_t> admitted{0};
    std::atomic<uint64_t> refused{0};
    uint64_t credit_ns = 0;  // the writer's only
    uint64_t last_ns = 0;
  };
  static void bump(std::atomic<uint64_t>& c) noexcept {  // one writer: no read-modify-write needed
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  // Open addressing, a few probes; a new bucket starts full (a vNIC's first
  // burst is admitted). The last bucket is the shared overflow.
  Bucket& bucket(uint32_t vnic_id, uint64_t now_ns) noexcept {
    const std::size_t start = (vnic_id * 0x9E3779B9u) >> 24;  // 0..255
    for (std::size_t i = 0; i < 8; ++i) {
      Bucket& b = buckets_[(start + i) % (kBuckets - 1)];
      if (!b.used.load(std::memory_order_relaxed)) {
        b.vnic_id.store(vnic_id, std::memory_order_relaxed);
        b.credit_ns = depth_ns_;
        b.last_ns = now_ns;
        b.used.store(true, std::memory_order_release);
        return b;
      }
      if (b.vnic_id.load(std::memory_order_relaxed) == vnic_id) return b;
    }
    Bucket& o = buckets_[kBuckets - 1];
    if (!o.used.load(std::memory_order_relaxed)) {
      o.vnic_id.store(kOverflowId, std::memory_order_relaxed);
      o.credit_ns = depth_ns_;
      o.last_ns = now_ns;
      o.used.store(true, std::memory_order_release);
    }
    return o;
  }

  Config cfg_;
  uint64_t cost_ns_;
  uint64_t depth_ns_;
  std::array<Bucket, kBuckets> buckets_{};
};

}  // namespace tandem::rnic::port
