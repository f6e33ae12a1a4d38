// Frames in flight through the simulated fabric: fixed-size buffers that are
// allocated once and recycled, so events carry a frame index, not bytes.
// Frames come in chunks of 256 (headers together, then the byte buffers,
// sized for the run's MTU), so a switch reading a frame's header touches one
// small record, not the start of a jumbo buffer.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
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
  // Where it left its last egress port: when it started, the port's enqueued
  // bytes up to and including it, and its sent bytes before it (INT).
  uint64_t dep_start = 0;
  uint64_t dep_enq = 0;
  uint64_t dep_tx = 0;
  rnic::IntEcho int_rec;
  uint32_t cap = 0;          // bytes data can hold
  uint8_t* data = nullptr;   // the frame's bytes (its chunk's buffer)

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
  explicit FramePool(uint32_t frame_bytes = kFrameCap) : cap_((frame_bytes + 63) & ~63u) {}
  FramePool(const FramePool&) = delete;
  FramePool& operator=(const FramePool&) = delete;

  uint32_t alloc() {
    if (free_.empty()) grow();
    uint32_t id = free_.back();
    free_.pop_back();
    return id;
  }
  void release(uint32_t id) noexcept { free_.push_back(id); }
  Frame& operator[](uint32_t id) noexcept { return chunks_[id >> kShift]->frames[id & (kChunk - 1)]; }
  std::size_t allocated() const noexcept { return chunks_.size() * kChunk; }
  std::size_t in_use() const noexcept { return allocated() - free_.size(); }
  uint32_t frame_bytes() const noexcept { return cap_; }
  // A hint that frame `id` is about to be read (its header).
  void prefetch(uint32_t id) const noexcept {
    if ((id >> kShift) < chunks_.size()) __builtin_prefetch(&chunks_[id >> kShift]->frames[id & (kChunk - 1)]);
  }

 private:
  static constexpr uint32_t kShift = 8, kChunk = 1u << kShift;
  struct Chunk {
    Frame frames[kChunk];
    std::unique_ptr<uint8_t[]> bytes;
  };

  void grow() {
    auto c = std::make_unique<Chunk>();
    c->bytes.reset(new uint8_t[std::size_t{kChunk} * cap_]);
    const uint32_t base = static_cast<uint32_t>(chunks_.size()) * kChunk;
    for (uint32_t i = 0; i < kChunk; ++i) {
      c->frames[i].cap = cap_;
      c->frames[i].data = c->bytes.get() + std::size_t{i} * cap_;
    }
    chunks_.push_back(std::move(c));
    for (uint32_t i = kChunk; i-- > 0;) free_.push_back(base + i);
  }

  uint32_t cap_;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  std::vector<uint32_t> free_;
};

}  // namespace tandem::rnic::sim
