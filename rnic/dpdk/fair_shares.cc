#include "rnic/dpdk/fair_shares.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "common/dpdk/telemetry.h"
#include "rnic/host/queue_layout.h"
#include "rnic/port/port_logic.h"
#include "rnic/port/standalone_table.h"

namespace tandem::rnic::dpdk {

using port::format_ipv4;

namespace {

using host::kResourceCount;
using host::kResourceNames;
using host::kUnlimited;

// "vnic<id>" for a vNIC of the port, "ip_a_b_c_d" for one it no longer has,
// "unbound": DPDK telemetry names take letters, digits, '_' and '/' only.
std::string account_name(uint32_t vnic_ip, uint32_t id) {
  if (vnic_ip == 0) return "unbound";
  if (id != 0) return "vnic" + std::to_string(id);
  std::string ip = format_ipv4(vnic_ip);
  std::replace(ip.begin(), ip.end(), '.', '_');
  return "ip_" + ip;
}

std::vector<host::TenantQuotas::Row> rows_of(const host::TenantQuotas& q) {
  std::vector<host::TenantQuotas::Row> rows(q.account_count());
  rows.resize(q.rows(rows));
  return rows;
}

}  // namespace

host::ResourceAmounts worker_capacity(const WorkerConfig& c) {
  host::ResourceAmounts cap{};
  const uint64_t qps = c.max_qps;
  cap[host::resource_index(host::Resource::kQps)] = qps;
  cap[host::resource_index(host::Resource::kCqs)] = qps;
  cap[host::resource_index(host::Resource::kMrs)] = std::min<uint64_t>(2 * qps, 65535);
  cap[host::resource_index(host::Resource::kPds)] = std::min<uint64_t>(qps, 65535);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const uint64_t ram = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : kUnlimited;
  cap[host::resource_index(host::Resource::kBytes)] = ram;
  cap[host::resource_index(host::Resource::kSrqs)] = uint64_t{port::PortLogic::kMaxSrqs} * c.lcores;
  // Queue memory for --max-qps QPs of 1024 x 1024 entries (rings and the transport's records),
  // and never more than a quarter of the machine: a QP of 32K x 32K costs ~16 MB of it.
  constexpr uint32_t kTypicalDepth = 1024;
  const uint64_t typical = port::PortLogic::qp_worker_bytes(port::PortConfig{}, kTypicalDepth, kTypicalDepth, false, false) +
                           host::qp_queue_layout(kTypicalDepth, kTypicalDepth).bytes;
  cap[host::resource_index(host::Resource::kQueueBytes)] = std::min(qps * typical, ram == kUnlimited ? ram : ram / 4);
  return cap;
}

host::ResourceLimits host_limits(const WorkerConfig& c) {
  host::ResourceLimits l;
  l.per_vnic = host::default_vnic_share(worker_capacity(c));
  for (const auto& [r, v] : c.vnic_limits) l.per_vnic[host::resource_index(r)] = v;
  for (const auto& [r, v] : c.app_limits) l.per_app[host::resource_index(r)] = v;
  return l;
}

nlohmann::json limits_json(const host::TenantQuotas& quotas, const VnicIdOf& id_of) {
  nlohmann::json j;
  const auto amounts = [](const host::ResourceAmounts& a) {
    nlohmann::json o;
    for (std::size_t i = 0; i < kResourceCount; ++i)
      o[kResourceNames[i]] = a[i] == kUnlimited ? nlohmann::json(nullptr) : nlohmann::json(a[i]);
    return o;
  };
  j["per_app"] = amounts(quotas.limits().per_app);
  j["per_vnic"] = amounts(quotas.limits().per_vnic);
  j["vnics"] = nlohmann::json::object();
  for (const host::TenantQuotas::Row& r : rows_of(quotas)) {
    const uint32_t id = r.vnic_ip == 0 ? 0 : id_of(r.vnic_ip);
    nlohmann::json& v = j["vnics"][account_name(r.vnic_ip, id)];
    v["vnic"] = id;
    v["ip"] = r.vnic_ip == 0 ? "" : format_ipv4(r.vnic_ip);
    for (std::size_t i = 0; i < kResourceCount; ++i) {
      v[std::string("used_") + kResourceNames[i]] = r.used[i];
      v[host::kRefusedNames[i]] = r.refused[i];
    }
  }
  return j;
}

void register_limits_telemetry(const host::TenantQuotas& quotas, VnicIdOf id_of) {
  using common::dpdk::TelemetryDict;
  common::dpdk::telemetry_register(
      "/tandem/rnic/limits",
      // DPDK takes at most 127 bytes of help.
      "tandem-rnic fair shares: limits, and per vNIC (vnic<id>) used_<res> and refused_<res>; first 40 vNICs",
      [&quotas, id_of = std::move(id_of)](std::string_view, TelemetryDict& out) {
        // One level of nesting only (DPDK telemetry does not nest containers deeper).
        const auto limits = [&out](const char* scope, const host::ResourceAmounts& a) {
          for (std::size_t i = 0; i < kResourceCount; ++i) {
            const std::string key = std::string(scope) + kResourceNames[i];
            if (a[i] == kUnlimited)
              out.str(key.c_str(), "none");
            else
              out.u64(key.c_str(), a[i]);
          }
        };
        limits("per_app_", quotas.limits().per_app);
        limits("per_vnic_", quotas.limits().per_vnic);
        std::vector<host::TenantQuotas::Row> rows = rows_of(quotas);
        if (rows.size() > 40) rows.resize(40);  // a telemetry reply is 16 KiB
        for (const host::TenantQuotas::Row& r : rows) {
          const uint32_t id = r.vnic_ip == 0 ? 0 : id_of(r.vnic_ip);
          out.dict(account_name(r.vnic_ip, id).c_str(), [&](TelemetryDict& d) {
            d.u64("vnic", id);
            d.str("ip", r.vnic_ip == 0 ? "" : format_ipv4(r.vnic_ip));
            for (std::size_t i = 0; i < kResourceCount; ++i) {
              d.u64((std::string("used_") + kResourceNames[i]).c_str(), r.used[i]);
              d.u64(host::kRefusedNames[i], r.refused[i]);
            }
          });
        }
        return 0;
      });
}

namespace {

std::string punt_name(uint32_t vnic_id) {
  return vnic_id == port::PuntBudget::kOverflowId ? "overflow" : "vnic" + std::to_string(vnic_id);
}

std::vector<port::PuntBudget::Row> punt_rows(const port::PuntBudget& b) {
  std::vector<port::PuntBudget::Row> rows(port::PuntBudget::kBuckets);
  rows.resize(b.rows(rows));
  std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.vnic_id < y.vnic_id; });
  return rows;
}

}  // namespace

nlohmann::json punt_budget_json(const port::PuntBudget& budget) {
  nlohmann::json j;
  j["rate_per_s"] = budget.config().rate_per_s;
  j["burst"] = budget.config().burst;
  j["refused"] = budget.refused_total();
  j["vnics"] = nlohmann::json::object();
  for (const port::PuntBudget::Row& r : punt_rows(budget))
    j["vnics"][punt_name(r.vnic_id)] = {{"admitted", r.admitted}, {"refused", r.refused}};
  return j;
}

void register_punt_telemetry(const port::PuntBudget& budget) {
  using common::dpdk::TelemetryDict;
  common::dpdk::telemetry_register(
      "/tandem/rnic/punts", "tandem-rnic punt budget: rate, burst, per vNIC (vnic<id>) admitted and refused; first 40",
      [&budget](std::string_view, TelemetryDict& out) {
        out.u64("rate_per_s", budget.config().rate_per_s);
        out.u64("burst", budget.config().burst);
        out.u64("refused", budget.refused_total());
        std::vector<port::PuntBudget::Row> rows = punt_rows(budget);
        if (rows.size() > 40) rows.resize(40);  // a telemetry reply is 16 KiB
        for (const port::PuntBudget::Row& r : rows)
          out.dict(punt_name(r.vnic_id).c_str(), [&](TelemetryDict& d) {
            d.u64("admitted", r.admitted);
            d.u64("refused", r.refused);
          });
        return 0;
      });
}

}  // namespace tandem::rnic::dpdk
