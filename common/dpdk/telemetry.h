// DPDK telemetry commands backed by C++ callables, so a process exposes its
// counter structs as JSON to dpdk-telemetry.py (rte_telemetry's callback
// carries no user pointer, hence the registry). Callbacks run on the
// telemetry thread: they read counters the fast path writes (64-bit aligned
// loads, possibly a few packets stale) and hand control requests over
// through atomics.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

struct rte_tel_data;

namespace tandem::common::dpdk {

// A JSON object being filled in for one telemetry reply.
class TelemetryDict {
 public:
  explicit TelemetryDict(rte_tel_data* d) noexcept : d_(d) {}
  void u64(const char* name, uint64_t v) noexcept;
  void i64(const char* name, int64_t v) noexcept;
  void str(const char* name, const std::string& v) noexcept;
  // A nested object under `name`.
  void dict(const char* name, const std::function<void(TelemetryDict&)>& fill) noexcept;

 private:
  rte_tel_data* d_;
};

// `fill` gets the parameters after the comma ("" if none) and the reply;
// it returns 0, or a negative value to make the command report an error.
using TelemetryHandler = std::function<int(std::string_view params, TelemetryDict& out)>;

// Registers `cmd` (must start with '/', e.g. "/tandem/fabric/paths").
// Throws std::runtime_error if DPDK refuses it.
void telemetry_register(const std::string& cmd, const std::string& help, TelemetryHandler fn);

}  // namespace tandem::common::dpdk
