#include "rnic/sim/path_discovery.h"

#include <algorithm>

#include "common/wire/entropy.h"

namespace tandem::rnic::sim {

std::vector<uint32_t> trace_route(const Fabric& fabric, uint32_t src_host, uint32_t dst_host, uint16_t sport) {
  std::vector<uint32_t> hops;
  const auto& nodes = fabric.nodes();
  const auto& ports = fabric.ports();
  uint32_t node = fabric.host_node(src_host);
  if (nodes[node].ports.empty()) return {};
  uint32_t port = nodes[node].ports[0];
  for (int guard = 0; guard < 64; ++guard) {
    hops.push_back(port);
    node = ports[port].peer;
    if (nodes[node].is_host) return nodes[node].host == dst_host ? hops : std::vector<uint32_t>{};
    int next = fabric.route(node, dst_host, host_ip(src_host), host_ip(dst_host), sport,
                            common::kRoceUdpPort, 17);
    if (next < 0) return {};
    port = static_cast<uint32_t>(next);
  }
  return {};
}

std::vector<uint16_t> discover_paths(const Fabric& fabric, uint32_t src_host, uint32_t dst_host,
                                     uint32_t max_paths, uint32_t candidates) {
  std::vector<uint16_t> found;
  std::vector<std::vector<uint32_t>> routes;
  for (uint32_t v = 0; v < candidates && found.size() < max_paths; ++v) {
    const uint16_t sport = common::entropy_port(v);
    auto r = trace_route(fabric, src_host, dst_host, sport);
    if (r.empty() || std::find(routes.begin(), routes.end(), r) != routes.end()) continue;
    routes.push_back(std::move(r));
    found.push_back(sport);
  }
  return found;
}

}  // namespace tandem::rnic::sim
