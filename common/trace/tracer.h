// A process's tracing state, owned by its data lcore: the rule in force and
// the ring it writes. Another thread (telemetry) hands a new rule or a stop
// over with request()/stop(); the lcore adopts it in poll(), which it calls
// from its periodic work, never per packet. With no rule the fast path tests
// active() once per burst and records nothing; under a rule a worker tests a
// flag it compiled into each QP (rnic/port/trace_flags.h), not the rule.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "common/trace/trace_ring.h"
#include "common/trace/trace_rule.h"

namespace tandem::common::trace {

class Tracer {
 public:
  void attach(RingHeader* ring) noexcept { ring_ = ring; }
  RingHeader* ring() const noexcept { return ring_; }
  bool active() const noexcept { return active_; }
  const Rule& rule() const noexcept { return rule_; }
  bool matches(uint32_t src, uint32_t dst, uint32_t dqpn, uint16_t pkey) const noexcept {
    return rule_.matches(src, dst, dqpn, pkey);
  }
  // Writes one record; the rule ends when its count (or the ring) is used up.
  void record(const Record& r) noexcept {
    if (!active_) return;
    ring_push(ring_, r);
    written_.store(written_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (--left_ == 0) set_active(false);
  }

  // Any thread: install `r` (replacing the rule in force) or stop.
  void request(const Rule& r) {
    std::lock_guard<std::mutex> g(mu_);
    pending_ = r;
    pending_on_ = true;
    pending_gen_.fetch_add(1, std::memory_order_release);
  }
  void stop() {
    std::lock_guard<std::mutex> g(mu_);
    pending_on_ = false;
    pending_gen_.fetch_add(1, std::memory_order_release);
  }
  // The lcore, from its periodic work: adopts a request (never waits for the
  // lock: a request being written is adopted next time) and ends a rule
  // whose time is up.
  void poll(uint64_t now_ns) noexcept {
    if (pending_gen_.load(std::memory_order_relaxed) != gen_) [[unlikely]]
      adopt(now_ns);
    if (active_ && until_ns_ != 0 && now_ns >= until_ns_) set_active(false);
  }
  // The lcore: changes whenever poll() adopted a request (a new rule or a
  // stop), so per-QP flags compiled from rule() know to compile again.
  uint64_t generation() const noexcept { return gen_; }
  // Any thread (telemetry): records written so far, whether a rule is in force.
  uint64_t written() const noexcept { return written_.load(std::memory_order_relaxed); }
  bool running() const noexcept { return running_.load(std::memory_order_relaxed); }

 private:
  void adopt(uint64_t now_ns) noexcept {
    if (std::unique_lock<std::mutex> g(mu_, std::try_to_lock); g.owns_lock()) {
      gen_ = pending_gen_.load(std::memory_order_relaxed);
      rule_ = pending_;
      set_active(pending_on_ && ring_ != nullptr);
      // A trace never overwrites its own beginning: at most one ring's worth.
      const uint64_t cap = ring_ ? ring_->capacity : 0;
      left_ = rule_.count ? std::min(rule_.count, cap) : cap;
      until_ns_ = rule_.ms ? now_ns + rule_.ms * 1'000'000 : 0;
    }
  }
  void set_active(bool on) noexcept {
    active_ = on;
    running_.store(on, std::memory_order_relaxed);
  }
  RingHeader* ring_ = nullptr;
  bool active_ = false;
  Rule rule_;
  uint64_t left_ = 0, until_ns_ = 0, gen_ = 0;
  std::atomic<uint64_t> written_{0};
  std::atomic<bool> running_{false};
  std::mutex mu_;
  Rule pending_;
  bool pending_on_ = false;
  std::atomic<uint64_t> pending_gen_{0};
};

}  // namespace tandem::common::trace
