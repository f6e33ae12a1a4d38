// Frames in flight through the simulated fabric: fixed-size buffers that are
// allocated once and recycled, so events carry a frame index, not bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "rnic/core/int_telemetry.h"

namespace tandem::rnic::sim {

inline constexpr uint32_t kFrameCap = 9216 + 128;  // jumbo MTU plus headers

struct Frame {
  // What the switches read, on the first cache line: the fabric parses the
  // 5-tuple once, when the host hands the frame to its port.
  uint32_t len = 0;
  uint32_t src_host = 0;    // injecting host, for per-source statistics
  uint32_t dst_host = 0;    // by the destination IPv4 address
  bool routable = false;    // IPv4: dst_host and ecmp_key are set
  bool retransmit = false;  // simulator bookkeeping only (not on the wire): the core resent it
  // INT (rnic/core/int_telemetry.h), carried beside the bytes: a data frame
  // the switches stamp (int_stamp; wire_extra counts its header on every
  // link), or an ACK echoing what its data frame collected (int_echo).
  bool int_stamp = false;
  bool int_echo = false;
  uint16_t wire_extra = 0;
  uint64_t ecmp_key = 0;    // common::ecmp_key of the 5-tuple
  rnic::IntEcho int_rec;
  uint8_t data[kFrameCap];

  // Bytes the frame occupies in a queue and on the wire (without kWireOverhead).
  uint32_t wire_len() const noexcept { return len + wire_extra; }
  void clear_meta() noexcept {
    retransmit = int_stamp = int_echo = false;
    wire_extra = 0;
    int_rec.hops = 0;
  }
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
