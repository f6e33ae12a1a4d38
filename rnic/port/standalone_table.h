// Standalone mode: the level-2 table of one RNIC port read from a YAML file
// instead of being programmed by the DPU agent (lab and pktgen set-ups).
// No DPDK here: the file is parsed into entries, then committed into a
// Level2Table in one transaction, exactly as the agent would.
//
// DPU mode reads the same file for the port's underlay identity only: the
// agent programs the table and, from protocol v3 on, the port's vNICs. A
// `vnics:` list is then optional and used only while the agent is an older
// one (v1/v2) that sends no vNIC entries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/channel/messages.h"
#include "rnic/port/vnic.h"
#include "rnic/table/level2_table.h"

namespace tandem::rnic::port {

struct StandaloneTable {
  uint32_t underlay_ip = 0;  // this port's underlay IPv4, host order
  common::MacAddr underlay_mac{};
  common::MacAddr gateway_mac{};
  std::vector<Vnic> vnics;
  std::vector<Level2Entry> entries;  // egress and ingress, ready to PUT
  // Explicit path sets (`paths: [port, ...]`), indexed by EgressAction::path_set_id - 1;
  // a count (`paths: N`) is path_base_port + [0, N) with path_set_id 0.
  std::vector<std::vector<uint16_t>> path_sets;

  const Vnic* vnic(uint32_t id) const noexcept {
    for (const Vnic& v : vnics)
      if (v.id == id) return &v;
    return nullptr;
  }
};

// Parses the file; throws std::runtime_error("FILE: what is wrong") on any
// missing key, bad address or inconsistent entry (start-up only). With
// vnics_optional (DPU mode) the file may list no vNICs.
StandaloneTable load_standalone_table(const std::string& path, bool vnics_optional = false);

// PUTs every entry in one transaction and commits it. Throws if the table
// refuses one (full, bad entry).
void commit_standalone_table(const StandaloneTable& t, Level2Table& table);

uint32_t parse_ipv4(const std::string& s);         // throws std::invalid_argument
common::MacAddr parse_mac(const std::string& s);   // throws std::invalid_argument
std::string format_ipv4(uint32_t ip);

}  // namespace tandem::rnic::port
