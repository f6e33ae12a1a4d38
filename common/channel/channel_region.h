// Creating, checking and addressing a channel file's contents once it is
// mapped: the agent initialises the region, the RNIC validates it before use,
// both find the BAR, ring areas and slots through the header's offsets. Works
// on plain memory (no I/O), so tests use an ordinary buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <string_view>

#include "common/channel/layout.h"
#include "common/channel/negotiate.h"

namespace tandem::common {

// Agent: lays out a zeroed region of at least compute_layout(g).total_bytes
// (page-aligned base, e.g. fresh from mmap) and publishes magic last.
// Returns an error line, or "" on success.
inline std::string init_channel(void* base, std::size_t size, const ChannelGeometry& g, uint32_t port_id,
                                std::string_view rnic_name, VersionRange agent = kOurVersions) {
  if (!g.valid()) return "channel geometry invalid (ring count must be a power of two, slots 64-byte multiples)";
  ChannelLayout l = compute_layout(g);
  if (size < l.total_bytes)
    return "channel region is " + std::to_string(size) + " bytes, layout needs " + std::to_string(l.total_bytes);
  if (reinterpret_cast<uintptr_t>(base) % kPageSize != 0) return "channel region is not page-aligned";
  if (rnic_name.size() >= sizeof(ChannelHeader::rnic_name)) return "RNIC name longer than 31 characters";
  auto* b = static_cast<uint8_t*>(base);
  auto* h = new (b) ChannelHeader();
  h->layout_version = kLayoutVersion;
  h->header_bytes = sizeof(ChannelHeader);
  h->total_bytes = l.total_bytes;
  h->agent_oldest_version = agent.oldest;
  h->agent_current_version = agent.current;
  h->message_size = kMessageSize;
  h->geometry = g;
  h->port_id = port_id;
  h->layout = l;
  std::memcpy(h->rnic_name, rnic_name.data(), rnic_name.size());
  new (b + l.bar_offset) Bar();
  for (uint32_t i = 0; i < g.slot_count; ++i) new (b + l.slot_offset + std::size_t{i} * g.slot_size) SlotHeader();
  h->magic.store(kChannelMagic, std::memory_order_release);
  return {};
}

// RNIC: everything it must check before trusting a region someone else wrote.
inline std::string check_channel(const void* base, std::size_t size) {
  if (size < sizeof(ChannelHeader)) return "channel region smaller than its header";
  const auto* h = static_cast<const ChannelHeader*>(base);
  if (h->magic.load(std::memory_order_acquire) != kChannelMagic) return "channel not initialised (bad magic)";
  if (h->layout_version != kLayoutVersion)
    return "channel layout version " + std::to_string(h->layout_version) + ", expected " +
           std::to_string(kLayoutVersion);
  if (h->header_bytes != sizeof(ChannelHeader) || h->message_size != kMessageSize)
    return "channel header or message size differs from this build";
  if (!h->geometry.valid() || !(h->layout == compute_layout(h->geometry)))
    return "channel layout does not match its geometry";
  if (h->total_bytes != h->layout.total_bytes || h->total_bytes > size)
    return "channel region is " + std::to_string(size) + " bytes, header says " + std::to_string(h->total_bytes);
  return {};
}

// RNIC: announce the versions it speaks (the agent may show them before HELLO).
inline void announce_rnic(ChannelHeader& h, VersionRange v, uint32_t pid) noexcept {
  h.rnic_pid.store(pid, std::memory_order_relaxed);
  h.rnic_versions.store(uint32_t{v.oldest} << 16 | v.current, std::memory_order_release);
}

inline Bar& channel_bar(void* base) noexcept {
  auto* h = static_cast<ChannelHeader*>(base);
  return *std::launder(reinterpret_cast<Bar*>(static_cast<uint8_t*>(base) + h->layout.bar_offset));
}
inline void* channel_cmd_ring(void* base) noexcept {
  return static_cast<uint8_t*>(base) + static_cast<ChannelHeader*>(base)->layout.cmd_ring_offset;
}
inline void* channel_evt_ring(void* base) noexcept {
  return static_cast<uint8_t*>(base) + static_cast<ChannelHeader*>(base)->layout.evt_ring_offset;
}
inline SlotHeader& channel_slot(void* base, uint32_t i) noexcept {
  auto* h = static_cast<ChannelHeader*>(base);
  return *std::launder(reinterpret_cast<SlotHeader*>(static_cast<uint8_t*>(base) + h->layout.slot_offset +
                                                     std::size_t{i % h->geometry.slot_count} * h->geometry.slot_size));
}

// RNIC: copies a punted packet's headers into slot i; returns the generation
// to send in PUNT (the payload is truncated to the slot's capacity).
inline uint32_t slot_write(void* base, uint32_t i, const uint8_t* data, std::size_t len) noexcept {
  auto* h = static_cast<ChannelHeader*>(base);
  SlotHeader& s = channel_slot(base, i);
  std::size_t cap = slot_payload_capacity(h->geometry);
  if (len > cap) len = cap;
  uint32_t gen = s.generation.load(std::memory_order_relaxed) + 1;
  s.generation.store(gen | 1u << 31, std::memory_order_relaxed);  // top bit: being written
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(reinterpret_cast<uint8_t*>(&s) + sizeof(SlotHeader), data, len);
  s.length = static_cast<uint32_t>(len);
  s.generation.store(gen & ~(1u << 31), std::memory_order_release);
  return gen & ~(1u << 31);
}

// Agent: copies slot i out if it still holds `generation`; false if it was
// reused meanwhile (the punt is then counted lost, never parsed torn).
inline bool slot_read(void* base, uint32_t i, uint32_t generation, uint8_t* out, std::size_t cap,
                      std::size_t& len) noexcept {
  SlotHeader& s = channel_slot(base, i);
  if (s.generation.load(std::memory_order_acquire) != generation) return false;
  len = s.length < cap ? s.length : cap;
  std::memcpy(out, reinterpret_cast<const uint8_t*>(&s) + sizeof(SlotHeader), len);
  std::atomic_thread_fence(std::memory_order_acquire);
  return s.generation.load(std::memory_order_relaxed) == generation;
}

}  // namespace tandem::common
