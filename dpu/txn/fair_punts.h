// Punts of one RNIC, queued per tenant and served round robin: a tenant that
// punts thousands of misses (a storm toward addresses that miss) waits behind
// its own punts, while another tenant's first miss is served in the next
// round. Bounded per tenant (what overflows is dropped and counted); the RNIC
// re-punts a miss that is still a miss, so a dropped punt delays, never loses,
// a legitimate flow. Sans-I/O: the agent pushes what its channel delivered
// and serves a budget per loop iteration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>

#include "common/channel/messages.h"

namespace tandem::dpu {

struct TenantPuntStats {
  uint64_t queued = 0;      // punts taken in
  uint64_t served = 0;      // handed to resolution
  uint64_t dropped = 0;     // its queue was full
  uint64_t over_quota = 0;  // resolved, refused: the tenant's flow quota on that RNIC was used up
  // Resolved and sent, then refused by the RNIC in a transaction of its own
  // (its buckets or table full, a bad entry): another tenant's refused
  // entries never count here (agent_channel.h splits a refused merge).
  uint64_t install_refused = 0;
};

class FairPunts {
 public:
  explicit FairPunts(std::size_t per_tenant_limit = 4096) : limit_(per_tenant_limit) {}

  // Queues p as tenant vni's; false (counted as dropped) if its queue is full.
  bool push(uint32_t vni, const common::PuntMsg& p) {
    TenantPuntStats& s = stats_[vni];
    std::deque<common::PuntMsg>& q = queues_[vni];
    if (q.size() >= limit_) {
      ++s.dropped;
      return false;
    }
    if (q.empty()) ring_.push_back(vni);
    q.push_back(p);
    ++s.queued;
    ++size_;
    return true;
  }

  // Hands up to n punts to f(vni, punt): one per tenant with punts waiting,
  // round after round. Returns how many.
  template <class F>
  std::size_t serve(std::size_t n, F&& f) {
    std::size_t done = 0;
    while (done < n && !ring_.empty()) {
      const uint32_t vni = ring_.front();
      ring_.pop_front();
      std::deque<common::PuntMsg>& q = queues_[vni];
      const common::PuntMsg p = q.front();
      q.pop_front();
      --size_;
      if (!q.empty()) ring_.push_back(vni);
      ++stats_[vni].served;
      ++done;
      f(vni, p);
    }
    return done;
  }

  void note_over_quota(uint32_t vni) { ++stats_[vni].over_quota; }
  void note_install_refused(uint32_t vni) { ++stats_[vni].install_refused; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  const std::map<uint32_t, TenantPuntStats>& stats() const noexcept { return stats_; }

 private:
  std::size_t limit_;
  std::size_t size_ = 0;
  std::map<uint32_t, std::deque<common::PuntMsg>> queues_;
  std::deque<uint32_t> ring_;  // tenants with punts waiting, in service order
  std::map<uint32_t, TenantPuntStats> stats_;
};

}  // namespace tandem::dpu
