#include "rnic/sim/topology.h"

#include <string>

namespace tandem::rnic::sim {

void build_topology(Fabric& fabric, const TopologySpec& spec) {
  if (spec.kind == TopologySpec::Kind::kParallel) {
    // h0 - s0 ={N paths}= s1 - h1: every path is a distinct link between the
    // two switches, so s0/s1 hash the 5-tuple over N equal-cost ports.
    uint32_t h0 = fabric.add_host("h0");
    uint32_t h1 = fabric.add_host("h1");
    uint32_t s0 = fabric.add_switch("s0");
    uint32_t s1 = fabric.add_switch("s1");
    fabric.connect(h0, s0, spec.host_link, spec.queue, "host0");
    fabric.connect(h1, s1, spec.host_link, spec.queue, "host1");
    for (std::size_t i = 0; i < spec.paths.size(); ++i) {
      const PathSpec& p = spec.paths[i];
      LinkParams lp = spec.fabric_link;
      lp.delay_ns = p.delay_ns;
      lp.jitter_ns = p.jitter_ns;
      lp.loss = p.loss;
      if (p.rate_bps) lp.rate_bps = p.rate_bps;
      fabric.connect(s0, s1, lp, spec.queue, "path" + std::to_string(i));
    }
  } else if (spec.kind == TopologySpec::Kind::kFatTree) {
    // HPCC's fat-tree: hosts under ToRs, every ToR of a pod wired to every
    // agg of the pod, the pod's k-th agg wired to the k-th group of
    // cores / aggs_per_pod cores.
    const uint32_t tors = spec.pods * spec.tors_per_pod, aggs = spec.pods * spec.aggs_per_pod;
    const uint32_t per_agg = spec.cores / spec.aggs_per_pod;
    std::vector<uint32_t> tor, agg, core;
    for (uint32_t h = 0; h < tors * spec.hosts_per_tor; ++h) fabric.add_host("h" + std::to_string(h));
    for (uint32_t t = 0; t < tors; ++t) tor.push_back(fabric.add_switch("tor" + std::to_string(t)));
    for (uint32_t a = 0; a < aggs; ++a) agg.push_back(fabric.add_switch("agg" + std::to_string(a)));
    for (uint32_t c = 0; c < spec.cores; ++c) core.push_back(fabric.add_switch("core" + std::to_string(c)));
    for (uint32_t h = 0; h < tors * spec.hosts_per_tor; ++h) {
      fabric.connect(fabric.host_node(h), tor[h / spec.hosts_per_tor], spec.host_link, spec.queue,
                     "host" + std::to_string(h));
    }
    for (uint32_t t = 0; t < tors; ++t) {
      const uint32_t pod = t / spec.tors_per_pod;
      for (uint32_t k = 0; k < spec.aggs_per_pod; ++k) {
        const uint32_t a = pod * spec.aggs_per_pod + k;
        fabric.connect(tor[t], agg[a], spec.fabric_link, spec.queue,
                       "tor" + std::to_string(t) + "-agg" + std::to_string(a));
      }
    }
    for (uint32_t a = 0; a < aggs; ++a) {
      const uint32_t k = a % spec.aggs_per_pod;
      for (uint32_t c = k * per_agg; c < (k + 1) * per_agg; ++c) {
        fabric.connect(agg[a], core[c], spec.fabric_link, spec.queue,
                       "agg" + std::to_string(a) + "-core" + std::to_string(c));
      }
    }
  } else {
    std::vector<uint32_t> leaves, spines;
    for (uint32_t l = 0; l < spec.leaves; ++l) leaves.push_back(fabric.add_switch("leaf" + std::to_string(l)));
    for (uint32_t s = 0; s < spec.spines; ++s) spines.push_back(fabric.add_switch("spine" + std::to_string(s)));
    for (uint32_t l = 0; l < spec.leaves; ++l) {
      for (uint32_t i = 0; i < spec.hosts_per_leaf; ++i) {
        uint32_t idx = l * spec.hosts_per_leaf + i;
        uint32_t h = fabric.add_host("h" + std::to_string(idx));
        fabric.connect(h, leaves[l], spec.host_link, spec.queue, "host" + std::to_string(idx));
      }
    }
    for (uint32_t l = 0; l < spec.leaves; ++l) {
      for (uint32_t s = 0; s < spec.spines; ++s) {
        fabric.connect(leaves[l], spines[s], spec.fabric_link, spec.queue,
                       "leaf" + std::to_string(l) + "-spine" + std::to_string(s));
      }
    }
  }
  fabric.compute_routes();
}

}  // namespace tandem::rnic::sim
