// tandemctl's reader of DPDK telemetry sockets (the v2 protocol dpdk-telemetry.py
// speaks: a greeting with the process's pid, then one command per message and
// one JSON reply), so `flow show` can find the worker behind an RNIC by the pid
// its BAR names and the lab fabric by the commands it answers.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem::dpu::ctl {

struct TelemetryEndpoint {
  std::string socket;  // <runtime-dir>/<file-prefix>/dpdk_telemetry.v2
  std::string prefix;  // the EAL --file-prefix
  long pid = 0;        // from the greeting
};

// Every telemetry socket under `runtime_dir` that answers its greeting.
std::vector<TelemetryEndpoint> discover_telemetry(const std::string& runtime_dir);

// `cmd`'s reply value (null if the process does not answer or knows no such command).
nlohmann::json telemetry_query(const TelemetryEndpoint& e, const std::string& cmd);

}  // namespace tandem::dpu::ctl
