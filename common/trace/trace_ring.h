// A process's trace ring: a header and a power-of-two array of records in a
// shared-memory file (trace_file.h), written by one thread (the data lcore),
// read by any process (tandemctl trace show) without stopping the writer.
// The writer overwrites the oldest record; a reader copies each record and
// keeps it only if its sequence number is still the one expected, so a record
// overwritten while being copied is skipped, never half-read.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/trace/trace_record.h"

namespace tandem::common::trace {

inline constexpr uint64_t kRingMagic = 0x54414e4454524331ull;  // "TANDTRC1"

struct RingHeader {
  uint64_t magic = 0;
  uint32_t version = 1;
  uint32_t record_size = sizeof(Record);
  uint64_t capacity = 0;       // records, a power of two
  int64_t clock_offset_ns = 0;  // CLOCK_MONOTONIC_RAW = record ts + this
  char process[48] = {};       // e.g. "tandem-rnic A" (who wrote it)
  std::atomic<uint64_t> head{0};  // records ever written
  uint64_t pad[5] = {};
};
static_assert(sizeof(RingHeader) % 64 == 0);

inline std::size_t ring_bytes(uint64_t capacity) noexcept { return sizeof(RingHeader) + capacity * sizeof(Record); }

inline Record* ring_records(RingHeader* h) noexcept { return reinterpret_cast<Record*>(h + 1); }
inline const Record* ring_records(const RingHeader* h) noexcept { return reinterpret_cast<const Record*>(h + 1); }

// Lays a ring out in `mem` (ring_bytes(capacity) bytes, zeroed by the caller or not).
inline RingHeader* ring_init(void* mem, uint64_t capacity, int64_t clock_offset_ns, const char* process) noexcept {
  auto* h = new (mem) RingHeader{};
  h->capacity = capacity;
  h->clock_offset_ns = clock_offset_ns;
  std::strncpy(h->process, process, sizeof h->process - 1);
  std::memset(static_cast<void*>(ring_records(h)), 0, capacity * sizeof(Record));
  h->magic = kRingMagic;
  return h;
}

// Single writer.
inline void ring_push(RingHeader* h, Record r) noexcept {
  const uint64_t i = h->head.load(std::memory_order_relaxed);
  Record& slot = ring_records(h)[i & (h->capacity - 1)];
  auto* seq = reinterpret_cast<std::atomic<uint32_t>*>(&slot.seq);
  seq->store(~static_cast<uint32_t>(i), std::memory_order_relaxed);  // "being written"
  std::atomic_thread_fence(std::memory_order_release);
  r.seq = static_cast<uint32_t>(i);
  std::memcpy(static_cast<void*>(&slot), &r, offsetof(Record, seq));
  seq->store(r.seq, std::memory_order_release);
  h->head.store(i + 1, std::memory_order_release);
}

// The records still in the ring, oldest first (what a concurrent writer
// overwrote meanwhile is left out).
inline std::vector<Record> ring_read(const RingHeader* h) {
  std::vector<Record> out;
  if (h->magic != kRingMagic || h->record_size != sizeof(Record) || h->capacity == 0) return out;
  const uint64_t head = h->head.load(std::memory_order_acquire);
  const uint64_t first = head > h->capacity ? head - h->capacity : 0;
  out.reserve(head - first);
  for (uint64_t i = first; i < head; ++i) {
    const Record& slot = ring_records(h)[i & (h->capacity - 1)];
    auto* seq = reinterpret_cast<const std::atomic<uint32_t>*>(&slot.seq);
    if (seq->load(std::memory_order_acquire) != static_cast<uint32_t>(i)) continue;
    Record r;
    std::memcpy(static_cast<void*>(&r), &slot, sizeof r);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq->load(std::memory_order_relaxed) != static_cast<uint32_t>(i)) continue;
    out.push_back(r);
  }
  return out;
}

}  // namespace tandem::common::trace
