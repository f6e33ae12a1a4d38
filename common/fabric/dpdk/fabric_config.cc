#include "common/fabric/dpdk/fabric_config.h"

#include <yaml-cpp/yaml.h>

#include <stdexcept>

#include "common/fabric/path_spec.h"
#include "common/fabric/route_table.h"

namespace tandem::common::fabric {

std::pair<uint32_t, uint16_t> parse_route(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos) throw std::invalid_argument("route '" + text + "' is not IP=PORT");
  const std::string port = text.substr(eq + 1);
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoul(port) > 65535)
    throw std::invalid_argument("route '" + text + "': port must be a number");
  return {parse_ipv4(text.substr(0, eq)), static_cast<uint16_t>(std::stoul(port))};
}

void load_fabric_yaml(const std::string& file, FabricConfig& c) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error("cannot read " + file + ": " + e.what());
  }
  try {
    if (auto r = root["routes"]) {
      if (!r.IsMap()) throw std::invalid_argument("'routes' must be a map IP: port");
      for (const auto& kv : r) c.routes.push_back(parse_route(kv.first.as<std::string>() + "=" +
                                                              kv.second.as<std::string>()));
    }
    if (auto p = root["paths"]) {
      if (!p.IsSequence() || p.size() == 0) throw std::invalid_argument("'paths' must be a non-empty list");
      c.paths.clear();
      for (const auto& spec : p) c.paths.push_back(parse_path_spec(spec.as<std::string>()));
    }
    if (auto s = root["ecmp_seed"]) c.ecmp_seed = s.as<uint32_t>();
    if (auto s = root["seed"]) c.rng_seed = s.as<uint64_t>();
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(file + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(file + ": " + e.what());
  }
}

}  // namespace tandem::common::fabric
