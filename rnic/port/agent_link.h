// What the port logic asks of the DPU agent's channel (rnic/port/commit_fanout.h's
// LcoreAgent in the worker, a recorder in tests): punt a table miss, say whether
// the agent is there, and the view of the committed table and vNICs this lcore
// reads at. Called on misses and route waits only, never per packet in steady state.
#pragma once

#include <cstdint>
#include <vector>

#include "common/channel/messages.h"
#include "rnic/table/level2_table.h"

namespace tandem::rnic::port {

// What one lcore reads the table and the agent's vNICs at: a copy of the newest
// committed version lcore 0 published, taken between two loop iterations
// (CommitFanout::adopt), so every packet of an iteration sees one committed
// version, and the vNIC list of that same version.
struct LcoreView {
  Level2Table::Snapshot snap;  // every lookup of the lcore uses it (its epoch is held back from reclaim)
  bool channel = false;        // the agent's channel is mapped (the fields below mean something)
  bool vnics_from_agent = false;  // the agent programs the vNICs (v3+)
  uint16_t negotiated_version = 0;
  uint64_t vnics_generation = 0;  // VnicList::generation() of `vnics`
  std::vector<common::VnicAction> vnics;  // the committed vNIC entries at snap.version
  uint64_t seq = 0;  // the publication this is a copy of (0: none yet)
};

// Where a table miss goes: the agent's channel (lcore 0), or lcore 0 by message.
class PuntSink {
 public:
  virtual ~PuntSink() = default;
  // `key` missed: ask the agent (rate-limited by the implementation).
  virtual void punt(const common::EntryKey& key, uint64_t now) noexcept = 0;
};

class AgentLink : public PuntSink {
 public:
  // The agent is attached and serving (punts are worth making).
  virtual bool active() const noexcept = 0;
  // The lcore's view (stable address for the link's life); nullptr: the
  // table's newest version and no vNICs from the agent (tests' recorder).
  virtual const LcoreView* view() const noexcept = 0;
};

}  // namespace tandem::rnic::port
