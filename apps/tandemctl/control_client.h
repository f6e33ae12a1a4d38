// tandemctl's side of the control socket: one JSON request line out, one
// reply line back. Throws std::runtime_error if the agent cannot be reached.
// A mapping import's file is opened here, with this user's rights, and its
// descriptor passed with the request (SCM_RIGHTS): the agent reads only what
// the caller could.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::dpu::ctl {

nlohmann::json call(const std::string& socket_path, const nlohmann::json& request);

}  // namespace tandem::dpu::ctl
