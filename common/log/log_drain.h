// The control thread's side of a LogRing: each line through the per-key rate
// limit into the process's logger, with "suppressed K similar messages" for
// what a key exceeded.
#pragma once

#include <cstdint>

#include "common/log/log.h"
#include "common/log/log_ring.h"
#include "common/log/rate_limiter.h"

namespace tandem::common::log {

inline uint32_t drain_ring(LogRing& ring, RateLimiter& limit, uint64_t now_ns, spdlog::logger& out = logger()) {
  const uint32_t n = ring.drain(
      [&](LogRing::Level level, uint64_t key, const char* line) {
        const RateLimiter::Verdict v = limit.admit(key, now_ns);
        if (v.suppressed != 0) out.warn("suppressed {} similar messages (key {:#x})", v.suppressed, key);
        if (!v.emit) return;
        if (level == LogRing::Level::kInfo)
          out.info("{}", line);
        else
          out.warn("{}", line);
      },
      [&](uint64_t lost) { out.warn("{} log lines dropped: the log ring was full", lost); });
  limit.expire(now_ns,
               [&](uint64_t key, uint64_t k) { out.warn("suppressed {} similar messages (key {:#x})", k, key); });
  return n;
}

}  // namespace tandem::common::log
