// Layout of the shared-memory file that stands in for PCIe between the DPU
// agent and one RNIC: header page, BAR page, command ring, event ring, slot
// area, all at page-aligned offsets from the start of the file (offsets, never
// pointers, since each process maps the file at its own address).
//
//   [0]           ChannelHeader      written by the agent at creation (magic last)
//   [bar]         Bar                written only by the RNIC, read by the agent
//   [cmd_ring]    rte_ring, element mode, kMessageSize elements, DPU -> RNIC
//   [evt_ring]    rte_ring, element mode, kMessageSize elements, RNIC -> DPU
//   [slots]       slot_count x slot_size, RNIC-written bulk payloads (punted headers)
//
// The rings are created by the */dpdk code (rte_ring_init on this memory, then
// rte_ring_{en,de}queue_elem with esize kMessageSize); here we only reserve space:
// kRingHeaderReserve for struct rte_ring plus ring_count elements. The dpdk side
// checks rte_ring_get_memsize_elem(kMessageSize, ring_count) <= ring_bytes.
//
// Cross-process fields are std::atomic (lock-free, hence address-free), each
// written by one side and on its own cache line so the two never share a line.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "common/channel/messages.h"

namespace tandem::common {

inline constexpr uint64_t kChannelMagic = 0x4E4148434D444E54ull;  // "TNDMCHAN" little-endian
inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kPageSize = 4096;
inline constexpr std::size_t kRingHeaderReserve = 4096;  // >= sizeof(struct rte_ring) in DPDK 22.11 (384)

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

constexpr std::size_t align_up(std::size_t v, std::size_t a) noexcept { return (v + a - 1) / a * a; }

// Sizes the agent chooses when it creates the file.
struct ChannelGeometry {
  uint32_t ring_count = 4096;  // ring capacity in messages (power of two; rte_ring holds count-1)
  uint32_t slot_count = 256;   // slots in the bulk area
  uint32_t slot_size = 2048;   // bytes per slot including its SlotHeader (multiple of 64)
  friend constexpr bool operator==(const ChannelGeometry&, const ChannelGeometry&) = default;

  constexpr bool valid() const noexcept {
    bool pow2 = ring_count >= 2 && (ring_count & (ring_count - 1)) == 0;
    return pow2 && slot_count >= 1 && slot_size >= 128 && slot_size % kCacheLine == 0;
  }
};

// Byte offsets of each area, derived from a geometry.
struct ChannelLayout {
  uint64_t bar_offset = 0;
  uint64_t cmd_ring_offset = 0;
  uint64_t cmd_ring_bytes = 0;
  uint64_t evt_ring_offset = 0;
  uint64_t evt_ring_bytes = 0;
  uint64_t slot_offset = 0;
  uint64_t slot_bytes = 0;
  uint64_t total_bytes = 0;
  friend constexpr bool operator==(const ChannelLayout&, const ChannelLayout&) = default;
};

constexpr std::size_t ring_area_bytes(uint32_t ring_count) noexcept {
  return align_up(kRingHeaderReserve + std::size_t{ring_count} * kMessageSize, kPageSize);
}

constexpr ChannelLayout compute_layout(const ChannelGeometry& g) noexcept {
  ChannelLayout l;
  l.bar_offset = kPageSize;  // header owns page 0
  l.cmd_ring_offset = l.bar_offset + kPageSize;
  l.cmd_ring_bytes = ring_area_bytes(g.ring_count);
  l.evt_ring_offset = l.cmd_ring_offset + l.cmd_ring_bytes;
  l.evt_ring_bytes = l.cmd_ring_bytes;
  l.slot_offset = l.evt_ring_offset + l.evt_ring_bytes;
  l.slot_bytes = align_up(std::size_t{g.slot_count} * g.slot_size, kPageSize);
  l.total_bytes = l.slot_offset + l.slot_bytes;
  return l;
}

// Page 0. Everything but the rnic_* fields is written once by the agent before
// it stores magic (release); the RNIC waits for magic (acquire), then checks
// layout_version and the sizes before touching anything else.
struct ChannelHeader {
  std::atomic<uint64_t> magic{0};  // kChannelMagic once the file is initialised
  uint32_t layout_version = 0;     // kLayoutVersion of the creator
  uint32_t header_bytes = 0;       // sizeof(ChannelHeader) of the creator
  uint64_t total_bytes = 0;        // file size
  uint16_t agent_oldest_version = 0;   // protocol versions the agent speaks
  uint16_t agent_current_version = 0;
  uint32_t message_size = 0;       // kMessageSize (ring element size)
  ChannelGeometry geometry;        // ring_count, slot_count, slot_size
  uint32_t port_id = 0;            // RNIC port this channel belongs to
  ChannelLayout layout;            // offsets of every area (= compute_layout(geometry))
  char rnic_name[32] = {};         // NUL-terminated RNIC name, e.g. "rnic0"

  // Written by the RNIC when it attaches (its own cache line).
  alignas(kCacheLine) std::atomic<uint32_t> rnic_versions{0};  // oldest << 16 | current; 0 = not attached
  std::atomic<uint32_t> rnic_pid{0};                           // informational
};
static_assert(offsetof(ChannelHeader, layout_version) == 8);
static_assert(offsetof(ChannelHeader, total_bytes) == 16);
static_assert(offsetof(ChannelHeader, agent_oldest_version) == 24);
static_assert(offsetof(ChannelHeader, message_size) == 28);
static_assert(offsetof(ChannelHeader, geometry) == 32);
static_assert(offsetof(ChannelHeader, port_id) == 44);
static_assert(offsetof(ChannelHeader, layout) == 48);
static_assert(offsetof(ChannelHeader, rnic_name) == 112);
static_assert(offsetof(ChannelHeader, rnic_versions) == 192);
static_assert(sizeof(ChannelHeader) <= kPageSize);

// Page 0 at kNoticeOffset, written by the agent only: `retired` != 0 says
// the agent has replaced this file with a new one at the same path (it found
// the old one scribbled on), so the RNIC maps the new one and says HELLO
// again. Past the header, so a file laid out before it existed reads 0.
struct ChannelNotice {
  std::atomic<uint64_t> retired{0};
};
inline constexpr std::size_t kNoticeOffset = 2048;
static_assert(sizeof(ChannelHeader) <= kNoticeOffset);
// Header bytes the agent writes once and the RNIC never writes (all before
// its own line): the agent compares them with its copy to see scribbles.
inline constexpr std::size_t kHeaderFixedBytes = offsetof(ChannelHeader, rnic_versions);

// The RNIC's view of the channel, mirrored in the BAR for the agent.
enum class RnicChannelState : uint32_t {
  kDown = 0,      // not attached / worker not running
  kAwaitHello = 1,  // attached, waiting for the agent's HELLO
  kSync = 2,      // negotiated, table not (re)synchronised with this agent yet
  kActive = 3,    // synchronised, accepting transactions
  kHeadless = 4,  // agent heartbeat gone: forwarding on the committed table, refusing changes
};

// Counters the RNIC publishes without messages (indexes of Bar::counters).
enum class BarCounter : uint32_t {
  kRxPackets = 0,
  kTxPackets,
  kTableHits,
  kTableMisses,
  kPunts,
  kPuntsDropped,  // punts the RNIC did not send: their vNIC over its punt budget (tandem-rnic --punt-budget)
  kTableFull,     // PUTs refused for lack of space
  kCommits,
  kAborts,
  kDrops,         // all per-reason drops summed (per-reason counters live in telemetry)
  kCount
};
inline constexpr std::size_t kBarCounterCount = static_cast<std::size_t>(BarCounter::kCount);

// One value alone on a cache line.
struct alignas(kCacheLine) BarLine {
  std::atomic<uint64_t> value{0};
};
static_assert(sizeof(BarLine) == kCacheLine);

// The "BAR" page: written only by the RNIC, polled by the agent.
// committed_version, digest and entry_count change together, so they are
// published under table_seq (a seqlock: odd while being written).
struct Bar {
  BarLine state;              // RnicChannelState
  BarLine heartbeat;          // +1 per worker loop iteration batch; a stall means a dead worker
  BarLine rnic_instance;      // changes on every RNIC start
  BarLine negotiated_version; // protocol version agreed in HELLO (0 = none)
  BarLine table_seq;          // seqlock over the three lines below
  BarLine committed_version;  // table version packets currently use
  BarLine digest;             // entry_digest.h digest of that table
  BarLine entry_count;        // entries in that table
  BarLine counters[kBarCounterCount];
};
static_assert(offsetof(Bar, heartbeat) == 1 * kCacheLine);
static_assert(offsetof(Bar, table_seq) == 4 * kCacheLine);
static_assert(offsetof(Bar, committed_version) == 5 * kCacheLine);
static_assert(offsetof(Bar, digest) == 6 * kCacheLine);
static_assert(offsetof(Bar, counters) == 8 * kCacheLine);
static_assert(sizeof(Bar) <= kPageSize);

struct CommittedTable {
  uint64_t version = 0;
  uint64_t digest = 0;
  uint64_t entry_count = 0;
  friend bool operator==(const CommittedTable&, const CommittedTable&) = default;
};

// RNIC side (single writer). Publishing only what changed keeps the seqlock
// even almost always: a writer preempted mid-update (cores are shared in the
// lab) would otherwise leave readers without a snapshot for a whole timeslice.
inline void bar_publish_table(Bar& bar, const CommittedTable& t) noexcept {
  uint64_t s = bar.table_seq.value.load(std::memory_order_relaxed);
  if (bar.committed_version.value.load(std::memory_order_relaxed) == t.version &&
      bar.digest.value.load(std::memory_order_relaxed) == t.digest &&
      bar.entry_count.value.load(std::memory_order_relaxed) == t.entry_count && s != 0)
    return;
  bar.table_seq.value.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  bar.committed_version.value.store(t.version, std::memory_order_relaxed);
  bar.digest.value.store(t.digest, std::memory_order_relaxed);
  bar.entry_count.value.store(t.entry_count, std::memory_order_relaxed);
  bar.table_seq.value.store(s + 2, std::memory_order_release);
}

// Agent side: a consistent snapshot, or nullopt if the RNIC was mid-update
// (the caller simply polls again).
inline std::optional<CommittedTable> bar_read_table(const Bar& bar) noexcept {
  uint64_t s1 = bar.table_seq.value.load(std::memory_order_acquire);
  if (s1 & 1) return std::nullopt;
  CommittedTable t;
  t.version = bar.committed_version.value.load(std::memory_order_relaxed);
  t.digest = bar.digest.value.load(std::memory_order_relaxed);
  t.entry_count = bar.entry_count.value.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (bar.table_seq.value.load(std::memory_order_relaxed) != s1) return std::nullopt;
  return t;
}

// Head of each slot in the slot area. The RNIC writes the payload, then bumps
// generation (release) and sends PUNT(slot, generation); the agent copies the
// payload and re-reads generation: if it changed, the slot was reused under it
// and the punt is counted as lost instead of being parsed half-overwritten.
struct SlotHeader {
  std::atomic<uint32_t> generation{0};
  uint32_t length = 0;  // payload bytes after this header
};
static_assert(sizeof(SlotHeader) == 8);

inline constexpr std::size_t slot_payload_capacity(const ChannelGeometry& g) noexcept {
  return g.slot_size - sizeof(SlotHeader);
}

// Default geometry: 4096-message rings (256 KiB each), 256 x 2 KiB slots.
inline constexpr ChannelLayout kDefaultLayout = compute_layout(ChannelGeometry{});
static_assert(kDefaultLayout.bar_offset == 4096);
static_assert(kDefaultLayout.cmd_ring_offset == 8192);
static_assert(kDefaultLayout.cmd_ring_bytes == 4096 + 4096 * 64);
static_assert(kDefaultLayout.evt_ring_offset == 8192 + 266240);
static_assert(kDefaultLayout.slot_offset == 8192 + 2 * 266240);
static_assert(kDefaultLayout.total_bytes == 8192 + 2 * 266240 + 256 * 2048);

}  // namespace tandem::common
