// `tandemctl flow show`: one virtual flow across the DPU-RNIC split. The agent
// answers for level 1 and the level-2 entries and versions (flow.show); the
// worker behind each RNIC (found by the pid in its BAR) for the QPs that
// carry the flow, their paths and credit state, and its drops; the lab
// fabric, if one runs, for the path each of the flow's source ports takes and
// that path's counters. docs/operations.md "Following one flow".
#pragma once
#include <cstdint>
#include <string>

namespace tandem::dpu::ctl {

struct FlowShowArgs {
  std::string socket;       // the agent's control socket
  std::string runtime_dir;  // DPDK's (/var/run/dpdk)
  std::string fabric;       // --fabric file prefix ("": the only fabric running, if one)
  uint32_t vni = 0;
  std::string src, dst;  // overlay addresses, or empty with rnic + qpn
  std::string rnic;
  uint32_t qpn = 0;
  bool json = false;
};

// Prints the flow; returns the exit status (0, or 2 with the reason on stderr).
int flow_show(const FlowShowArgs& a);

}  // namespace tandem::dpu::ctl
