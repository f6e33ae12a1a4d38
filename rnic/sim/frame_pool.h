// Frames in flight through the simulated fabric: fixed-size buffers that are
// allocated once and recycled, so events carry a frame index, not bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace tandem::rnic::sim {

inline constexpr uint32_t kFrameCap = 9216 + 128;  // jumbo MTU plus headers

struct Frame {
  uint32_t len = 0;
  uint32_t src_host = 0;  // injecting host, for per-source statistics
  bool retransmit = false;  // simulator bookkeeping only (not on the wire): the core resent it
  uint8_t data[kFrameCap];
};

class FramePool {
 public:
  uint32_t alloc() {
    if (free_.empty()) {
      frames_.emplace_back(new Frame);
      return static_cast<uint32_t>(frames_.size() - 1);
    }
    uint32_t id = free_.back();
    free_.pop_back();
    return id;
  }
  void release(uint32_t id) noexcept { free_.push_back(id); }
  Frame& operator[](uint32_t id) noexcept { return *frames_[id]; }
  std::size_t allocated() const noexcept { return frames_.size(); }
  std::size_t in_use() const noexcept { return frames_.size() - free_.size(); }

  FramePool() = default;
  FramePool(const FramePool&) = delete;
  FramePool& operator=(const FramePool&) = delete;
  ~FramePool() {
    for (Frame* f : frames_) delete f;
  }

 private:
  std::vector<Frame*> frames_;
  std::vector<uint32_t> free_;
};

}  // namespace tandem::rnic::sim
