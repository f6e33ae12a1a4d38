// tandemctl's side of the control socket: one JSON request line out, one
// reply line back. Throws std::runtime_error if the agent cannot be reached.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::dpu::ctl {

nlohmann::json call(const std::string& socket_path, const nlohmann::json& request);

}  // namespace tandem::dpu::ctl
