#include "common/dpdk/telemetry.h"

#include <rte_telemetry.h>

#include <map>
#include <mutex>
#include <stdexcept>

namespace tandem::common::dpdk {

namespace {
std::mutex g_mu;
std::map<std::string, TelemetryHandler, std::less<>>& registry() {
  static std::map<std::string, TelemetryHandler, std::less<>> r;
  return r;
}

int trampoline(const char* cmd, const char* params, rte_tel_data* d) {
  TelemetryHandler fn;
  {
    std::lock_guard lock(g_mu);
    auto it = registry().find(std::string_view(cmd));
    if (it == registry().end()) return -1;
    fn = it->second;
  }
  rte_tel_data_start_dict(d);
  TelemetryDict out(d);
  return fn(params ? std::string_view(params) : std::string_view(), out);
}
}  // namespace

void TelemetryDict::u64(const char* name, uint64_t v) noexcept { rte_tel_data_add_dict_u64(d_, name, v); }
void TelemetryDict::i64(const char* name, int64_t v) noexcept {
  rte_tel_data_add_dict_int(d_, name, static_cast<int>(v));
}
void TelemetryDict::str(const char* name, const std::string& v) noexcept {
  rte_tel_data_add_dict_string(d_, name, v.c_str());
}
void TelemetryDict::dict(const char* name, const std::function<void(TelemetryDict&)>& fill) noexcept {
  rte_tel_data* child = rte_tel_data_alloc();
  if (child == nullptr) return;
  rte_tel_data_start_dict(child);
  TelemetryDict c(child);
  fill(c);
  if (rte_tel_data_add_dict_container(d_, name, child, 0) != 0) rte_tel_data_free(child);
}

void telemetry_register(const std::string& cmd, const std::string& help, TelemetryHandler fn) {
  {
    std::lock_guard lock(g_mu);
    registry()[cmd] = std::move(fn);
  }
  if (rte_telemetry_register_cmd(cmd.c_str(), trampoline, help.c_str()) != 0)
    throw std::runtime_error("cannot register telemetry command " + cmd);
}

}  // namespace tandem::common::dpdk
