// Where the agent's channel files come from: the one piece of I/O the agent
// core needs for its RNICs. The core sees a mapped file only as a
// common::ChannelView (its own geometry and ring ends); tandem-dpu maps real
// files with rte_rings in them (dpu/dpdk/channel_file.h), unit tests plain
// memory with a fake worker on the other ends (tests/unit/dpu/fake_channel.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/channel/channel_view.h"

namespace tandem::dpu {

class ChannelMapping {
 public:
  virtual ~ChannelMapping() = default;
  virtual common::ChannelView& view() noexcept = 0;
  virtual const std::string& path() const noexcept = 0;
  // An existing valid file taken over (agent restart), not a new one.
  virtual bool reused() const noexcept = 0;
};

class ChannelOpener {
 public:
  virtual ~ChannelOpener() = default;
  // The channel file of RNIC `rnic` (port `port_id` of this agent). `fresh`:
  // always a new file (the old one was scribbled on); else a valid existing
  // one is kept. Throws std::runtime_error.
  virtual std::unique_ptr<ChannelMapping> open(const std::string& rnic, uint32_t port_id, bool fresh) = 0;
  virtual std::string path_of(const std::string& rnic) const = 0;
};

}  // namespace tandem::dpu
