// Fair shares of one worker's host resources: how many QPs, CQs, MRs, PDs and
// SRQs, how many registered bytes and how much queue memory an application,
// and a vNIC's applications together, may hold, so that one tenant cannot take what the others need.
// Decided on the control thread (the host server's ControlServer) at each create;
// the counters are atomics so telemetry may read them from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::rnic::host {

// The resources with a limit: name (flags, counters, JSON) and what it counts.
#define TANDEM_FOREACH_QUOTA_RESOURCE(X)                                   \
  X(qps, "QPs")                                                            \
  X(cqs, "CQs")                                                            \
  X(mrs, "MRs")                                                            \
  X(pds, "PDs")                                                            \
  X(bytes, "registered bytes (the worker's mappings of the MRs' memfds)")      \
  X(srqs, "SRQs")                                                          \
  X(queue_bytes, "queue memory: QP/SRQ/CQ rings mapped and the transport's records for their depths")

// In the order of TANDEM_FOREACH_QUOTA_RESOURCE.
enum class Resource : uint8_t { kQps, kCqs, kMrs, kPds, kBytes, kSrqs, kQueueBytes };
inline constexpr std::size_t kResourceCount = 0
#define TANDEM_QUOTA_COUNT(name, doc) +1
    TANDEM_FOREACH_QUOTA_RESOURCE(TANDEM_QUOTA_COUNT)
#undef TANDEM_QUOTA_COUNT
    ;
static_assert(kResourceCount == static_cast<std::size_t>(Resource::kQueueBytes) + 1);
inline constexpr const char* kResourceNames[kResourceCount] = {
#define TANDEM_QUOTA_NAME(name, doc) #name,
    TANDEM_FOREACH_QUOTA_RESOURCE(TANDEM_QUOTA_NAME)
#undef TANDEM_QUOTA_NAME
};
// "refused_qps"...: the per-vNIC refusal counters' names.
inline constexpr const char* kRefusedNames[kResourceCount] = {
#define TANDEM_QUOTA_REFUSED(name, doc) "refused_" #name,
    TANDEM_FOREACH_QUOTA_RESOURCE(TANDEM_QUOTA_REFUSED)
#undef TANDEM_QUOTA_REFUSED
};
constexpr std::size_t resource_index(Resource r) noexcept { return static_cast<std::size_t>(r); }
// The resource called `name` ("qps"...); false if there is none.
bool resource_by_name(std::string_view name, Resource* out) noexcept;

inline constexpr uint64_t kUnlimited = UINT64_MAX;

// One or more "RES=N" separated by commas (tandem-rnic --limit-per-*): RES a
// resource name, N a count, K/M/G/T (binary) suffixes allowed, or "none".
// Appends to *out; on a bad item returns false and says why in *error.
using LimitSetting = std::pair<Resource, uint64_t>;
bool parse_limits(std::string_view text, std::vector<LimitSetting>* out, std::string* error);
using ResourceAmounts = std::array<uint64_t, kResourceCount>;
inline constexpr ResourceAmounts kNoLimits = [] {
  ResourceAmounts a{};
  a.fill(kUnlimited);
  return a;
}();

struct ResourceLimits {
  ResourceAmounts per_app = kNoLimits;   // one application (one connection to the worker)
  ResourceAmounts per_vnic = kNoLimits;  // a vNIC's applications together (unbound ones: one more group)
};

// The default per-vNIC share: three quarters of what the worker has (capacity
// of each resource; kUnlimited stays so), so that one tenant always leaves a
// quarter to the others while a single tenant can still use most of a worker.
ResourceAmounts default_vnic_share(const ResourceAmounts& capacity) noexcept;

// Per-vNIC usage and refusals. Written by one thread (the control half), read
// by any (relaxed atomics); accounts are never freed, so a reader never sees
// one go away. An application holds its own usage (ResourceAmounts) beside it.
class TenantQuotas {
 public:
  static constexpr std::size_t kMaxAccounts = 1024;  // vNICs seen since start, + the unbound group
  static constexpr uint32_t kNoAccount = UINT32_MAX;

  explicit TenantQuotas(const ResourceLimits& limits) : limits_(limits) {}

  // The account of the vNIC with overlay IPv4 `vnic_ip` (0: applications bound
  // to none), made on first use; kNoAccount if the table is full.
  uint32_t account(uint32_t vnic_ip) noexcept;

  // Takes `n` of `r` for an application that holds `app` in account `acct`.
  // Over the application's or the vNIC's limit: nothing taken, the refusal is
  // counted for the vNIC, and false.
  bool take(ResourceAmounts& app, uint32_t acct, Resource r, uint64_t n) noexcept;
  // Gives back what take() took; app may be null (its application is gone).
  void give(ResourceAmounts* app, uint32_t acct, Resource r, uint64_t n) noexcept;

  struct Row {
    uint32_t vnic_ip = 0;  // 0: applications bound to no vNIC
    ResourceAmounts used{};
    ResourceAmounts refused{};
  };
  // Accounts in the order they were made: any thread.
  std::size_t rows(std::span<Row> out) const noexcept;
  std::size_t account_count() const noexcept { return count_.load(std::memory_order_acquire); }
  ResourceAmounts refused_total() const noexcept;
  const ResourceLimits& limits() const noexcept { return limits_; }

 private:
  struct Account {
    std::atomic<uint32_t> vnic_ip{0};
    std::array<std::atomic<uint64_t>, kResourceCount> used{};
    std::array<std::atomic<uint64_t>, kResourceCount> refused{};
  };
  ResourceLimits limits_;
  std::array<Account, kMaxAccounts> accounts_{};
  std::atomic<std::size_t> count_{0};  // accounts made; published with release after the ip is set
};

}  // namespace tandem::rnic::host
