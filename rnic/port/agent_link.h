// What the port logic asks of the DPU agent's channel (rnic/dpdk/dpu_link.h
// in the worker, a recorder in tests): punt a table miss, say whether the
// agent is there, and the channel's committed vNICs. Called on misses and
// route waits only, never per packet in steady state.
#pragma once

#include <cstdint>

#include "common/channel/messages.h"
#include "rnic/table/rnic_channel.h"

namespace tandem::rnic::port {

class AgentLink {
 public:
  virtual ~AgentLink() = default;
  // `key` missed: ask the agent (rate-limited by the implementation).
  virtual void punt(const common::EntryKey& key, uint64_t now) noexcept = 0;
  // The agent is attached and serving (punts are worth making).
  virtual bool active() const noexcept = 0;
  // The channel whose committed vNICs the port follows; nullptr: none yet.
  virtual const RnicChannel* channel() const noexcept = 0;
};

}  // namespace tandem::rnic::port
