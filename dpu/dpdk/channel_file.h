// One RNIC's channel file, agent side: created (or, after an agent restart,
// re-opened) in the channel directory, mapped shared, laid out with
// common/channel and its two rings initialised with rte_ring_init in the
// reserved areas. The agent reaches it only through view(): its own copy of
// the geometry and its own ends of the rings (common/channel/channel_view.h),
// never rte_ring's functions, which would trust the fields a worker can
// write. DPDK types stay out of this header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/channel/channel_view.h"
#include "dpu/agent/channel_source.h"

struct rte_ring;

namespace tandem::dpu::dpdk {

class ChannelFile final : public ChannelMapping {
 public:
  enum class Open : uint8_t {
    kReuse,  // re-open a valid file of this RNIC as it is (a live worker may map it)
    kFresh,  // always a new file (the old one was scribbled on): the worker re-attaches
  };
  // kReuse keeps an existing, valid file of the same RNIC (truncating it
  // would SIGBUS a worker mapping it); else, and always with kFresh, the old
  // file is unlinked and a new one created. Throws std::runtime_error.
  ChannelFile(const std::string& path, const std::string& rnic, uint32_t port_id, Open how = Open::kReuse);
  ~ChannelFile() override;
  ChannelFile(const ChannelFile&) = delete;
  ChannelFile& operator=(const ChannelFile&) = delete;

  void* base() const noexcept { return base_; }
  common::ChannelView& view() noexcept override { return view_; }
  const common::ChannelView& view() const noexcept { return view_; }
  // The raw rings, for a benchmark's ping-pong between two trusting processes only.
  rte_ring* cmd_ring() const noexcept { return cmd_; }
  rte_ring* evt_ring() const noexcept { return evt_; }
  const std::string& path() const noexcept override { return path_; }
  bool reused() const noexcept override { return reused_; }

  // Where rte_ring (this DPDK) keeps its indices, for common::RingProducer/Consumer.
  static common::RingLayout ring_layout(uint32_t ring_count) noexcept;

 private:
  bool try_reuse(const std::string& rnic);

  std::string path_;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  rte_ring* cmd_ = nullptr;
  rte_ring* evt_ = nullptr;
  bool reused_ = false;
  common::ChannelView view_;
};

// The agent core's source of channel files: <dir>/tandem-<rnic>.chan.
class ChannelFiles final : public ChannelOpener {
 public:
  explicit ChannelFiles(std::string dir) : dir_(std::move(dir)) {}
  std::unique_ptr<ChannelMapping> open(const std::string& rnic, uint32_t port_id, bool fresh) override {
    return std::make_unique<ChannelFile>(path_of(rnic), rnic, port_id, fresh ? ChannelFile::Open::kFresh
                                                                             : ChannelFile::Open::kReuse);
  }
  std::string path_of(const std::string& rnic) const override { return dir_ + "/tandem-" + rnic + ".chan"; }

 private:
  std::string dir_;
};

}  // namespace tandem::dpu::dpdk
