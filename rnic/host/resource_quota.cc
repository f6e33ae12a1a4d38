#include "rnic/host/resource_quota.h"

#include <algorithm>

namespace tandem::rnic::host {

bool resource_by_name(std::string_view name, Resource* out) noexcept {
  for (std::size_t i = 0; i < kResourceCount; ++i) {
    if (name == kResourceNames[i]) {
      *out = static_cast<Resource>(i);
      return true;
    }
  }
  return false;
}

bool parse_limits(std::string_view text, std::vector<LimitSetting>* out, std::string* error) {
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const std::size_t eq = item.find('=');
    Resource r;
    if (eq == std::string_view::npos || !resource_by_name(item.substr(0, eq), &r)) {
      *error = "want RES=N with RES one of qps, cqs, mrs, pds, bytes, srqs, queue_bytes; got '" + std::string(item) + "'";
      return false;
    }
    std::string_view num = item.substr(eq + 1);
    if (num == "none") {
      out->emplace_back(r, kUnlimited);
      continue;
    }
    unsigned shift = 0;
    if (!num.empty()) {
      switch (num.back()) {
        case 'K': case 'k': shift = 10; break;
        case 'M': case 'm': shift = 20; break;
        case 'G': case 'g': shift = 30; break;
        case 'T': case 't': shift = 40; break;
        default: break;
      }
      if (shift != 0) num.remove_suffix(1);
    }
    uint64_t v = 0;
    bool ok = !num.empty() && num.size() <= 19;
    for (char ch : num) {
      ok = ok && ch >= '0' && ch <= '9';
      v = v * 10 + static_cast<uint64_t>(ch - '0');
    }
    if (!ok || (shift != 0 && v > (kUnlimited >> shift))) {
      *error = "bad number in '" + std::string(item) + "' (N, NK, NM, NG, NT or none)";
      return false;
    }
    out->emplace_back(r, v << shift);
  }
  return true;
}

ResourceAmounts default_vnic_share(const ResourceAmounts& capacity) noexcept {
  ResourceAmounts share = capacity;
  for (uint64_t& v : share)
    if (v != kUnlimited) v = v - v / 4;  // at least 1 of a capacity of 1
  return share;
}

uint32_t TenantQuotas::account(uint32_t vnic_ip) noexcept {
  const std::size_t n = count_.load(std::memory_order_relaxed);  // the only writer
  for (std::size_t i = 0; i < n; ++i)
    if (accounts_[i].vnic_ip.load(std::memory_order_relaxed) == vnic_ip) return static_cast<uint32_t>(i);
  if (n == kMaxAccounts) return kNoAccount;
  accounts_[n].vnic_ip.store(vnic_ip, std::memory_order_relaxed);
  count_.store(n + 1, std::memory_order_release);
  return static_cast<uint32_t>(n);
}

bool TenantQuotas::take(ResourceAmounts& app, uint32_t acct, Resource r, uint64_t n) noexcept {
  const std::size_t i = resource_index(r);
  if (acct >= kMaxAccounts) return false;
  Account& a = accounts_[acct];
  const uint64_t used = a.used[i].load(std::memory_order_relaxed);
  // Subtractions, not sums: a huge n must not wrap past a limit.
  const bool fits = n <= limits_.per_app[i] && app[i] <= limits_.per_app[i] - n &&
                    n <= limits_.per_vnic[i] && used <= limits_.per_vnic[i] - n;
  if (!fits) {
    a.refused[i].fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  app[i] += n;
  a.used[i].store(used + n, std::memory_order_relaxed);
  return true;
}

void TenantQuotas::give(ResourceAmounts* app, uint32_t acct, Resource r, uint64_t n) noexcept {
  const std::size_t i = resource_index(r);
  if (app != nullptr) (*app)[i] -= n <= (*app)[i] ? n : (*app)[i];
  if (acct >= kMaxAccounts) return;
  Account& a = accounts_[acct];
  const uint64_t used = a.used[i].load(std::memory_order_relaxed);
  a.used[i].store(used >= n ? used - n : 0, std::memory_order_relaxed);
}

std::size_t TenantQuotas::rows(std::span<Row> out) const noexcept {
  const std::size_t n = std::min(count_.load(std::memory_order_acquire), out.size());
  for (std::size_t k = 0; k < n; ++k) {
    const Account& a = accounts_[k];
    Row& row = out[k];
    row.vnic_ip = a.vnic_ip.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < kResourceCount; ++i) {
      row.used[i] = a.used[i].load(std::memory_order_relaxed);
      row.refused[i] = a.refused[i].load(std::memory_order_relaxed);
    }
  }
  return n;
}

ResourceAmounts TenantQuotas::refused_total() const noexcept {
  ResourceAmounts total{};
  const std::size_t n = count_.load(std::memory_order_acquire);
  for (std::size_t k = 0; k < n; ++k)
    for (std::size_t i = 0; i < kResourceCount; ++i)
      total[i] += accounts_[k].refused[i].load(std::memory_order_relaxed);
  return total;
}

}  // namespace tandem::rnic::host
