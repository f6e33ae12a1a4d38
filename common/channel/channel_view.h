// The agent's view of one channel file it created (or re-opened and
// checked): the geometry and offsets are its own copy, taken then, never read
// from the file again, so an RNIC worker that scribbles on the header cannot
// move the BAR, the rings or the slots the agent reads. It also keeps a copy
// of the bytes the worker must never write (the header, each ring's fixed
// fields) and check() compares them, with the rings' index checks
// (ring_view.h), to tell the caller when to reset the link. Sans-I/O: plain
// memory; the */dpdk code maps the file and supplies the rte_ring offsets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#include "common/channel/layout.h"
#include "common/channel/ring_view.h"

namespace tandem::common {

class ChannelView {
 public:
  ChannelView() = default;
  // `base` maps at least compute_layout(g).total_bytes (`size`). `cmd` and
  // `evt` are the agent's ends of the two rings (fresh, or adopted).
  ChannelView(void* base, std::size_t size, const ChannelGeometry& g, const RingLayout& ring, RingProducer cmd,
              RingConsumer evt) noexcept
      : base_(static_cast<uint8_t*>(base)), size_(size), g_(g), l_(compute_layout(g)), ring_(ring), cmd_(cmd),
        evt_(evt) {
    std::memcpy(header_.data(), base_, kHeaderFixedBytes);
    std::memcpy(cmd_fixed_.data(), base_ + l_.cmd_ring_offset, fixed_len());
    std::memcpy(evt_fixed_.data(), base_ + l_.evt_ring_offset, fixed_len());
  }
  // Whether a region of `size` bytes can hold geometry g with rings laid out as `ring`.
  static bool fits(std::size_t size, const ChannelGeometry& g, const RingLayout& ring) noexcept {
    const ChannelLayout l = compute_layout(g);
    return g.valid() && ring.valid() && ring.size == g.ring_count && ring.bytes() <= l.cmd_ring_bytes &&
           ring.fixed_bytes <= kMaxFixed && size >= l.total_bytes;
  }

  bool mapped() const noexcept { return base_ != nullptr; }
  void* base() const noexcept { return base_; }
  std::size_t size() const noexcept { return size_; }
  const ChannelGeometry& geometry() const noexcept { return g_; }
  const ChannelLayout& layout() const noexcept { return l_; }

  const Bar& bar() const noexcept { return *std::launder(reinterpret_cast<const Bar*>(base_ + l_.bar_offset)); }
  const ChannelHeader& header() const noexcept { return *std::launder(reinterpret_cast<const ChannelHeader*>(base_)); }
  uint8_t* cmd_ring() const noexcept { return base_ + l_.cmd_ring_offset; }
  uint8_t* evt_ring() const noexcept { return base_ + l_.evt_ring_offset; }
  RingProducer& commands() noexcept { return cmd_; }
  RingConsumer& events() noexcept { return evt_; }

  enum class SlotRead : uint8_t { kOk, kReused, kOutOfRange };
  // Copies slot `slot`'s payload out if it still holds `generation` (at most
  // `cap` bytes and never past the slot). A slot number beyond the area is
  // an RNIC's lie, not a race: kOutOfRange.
  SlotRead read_slot(uint32_t slot, uint32_t generation, uint8_t* out, std::size_t cap, std::size_t& len) const noexcept {
    len = 0;
    if (slot >= g_.slot_count) return SlotRead::kOutOfRange;
    uint8_t* s = base_ + l_.slot_offset + std::size_t{slot} * g_.slot_size;
    auto& hdr = *std::launder(reinterpret_cast<SlotHeader*>(s));
    if (hdr.generation.load(std::memory_order_acquire) != generation) return SlotRead::kReused;
    const uint32_t claimed = std::atomic_ref<uint32_t>(hdr.length).load(std::memory_order_relaxed);
    std::size_t n = slot_payload_capacity(g_);
    if (claimed < n) n = claimed;
    if (cap < n) n = cap;
    std::memcpy(out, s + sizeof(SlotHeader), n);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (hdr.generation.load(std::memory_order_relaxed) != generation) return SlotRead::kReused;
    len = n;
    return SlotRead::kOk;
  }

  // nullptr while the file is as the agent made it and the rings' indices
  // are possible; else what the worker broke (the caller resets the link).
  const char* check() const noexcept {
    if (cmd_.fault() != RingFault::kNone) return "command ring: consumer index impossible";
    if (evt_.fault() != RingFault::kNone) return "event ring: producer index impossible";
    if (std::memcmp(header_.data(), base_, kHeaderFixedBytes) != 0) return "header overwritten";
    if (std::memcmp(cmd_fixed_.data(), base_ + l_.cmd_ring_offset, fixed_len()) != 0)
      return "command ring header overwritten";
    if (std::memcmp(evt_fixed_.data(), base_ + l_.evt_ring_offset, fixed_len()) != 0)
      return "event ring header overwritten";
    return nullptr;
  }

  // Tells a worker still mapping this file that a new one replaces it.
  void retire() noexcept {
    std::launder(reinterpret_cast<ChannelNotice*>(base_ + kNoticeOffset))->retired.store(1, std::memory_order_release);
  }

 private:
  static constexpr std::size_t kMaxFixed = 128;
  std::size_t fixed_len() const noexcept { return ring_.fixed_bytes < kMaxFixed ? ring_.fixed_bytes : kMaxFixed; }

  uint8_t* base_ = nullptr;
  std::size_t size_ = 0;
  ChannelGeometry g_;
  ChannelLayout l_;
  RingLayout ring_;
  RingProducer cmd_;
  RingConsumer evt_;
  std::array<uint8_t, kHeaderFixedBytes> header_{};
  std::array<uint8_t, kMaxFixed> cmd_fixed_{}, evt_fixed_{};
};

}  // namespace tandem::common
