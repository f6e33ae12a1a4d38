// `tandemctl trace show`'s logic: the records of several processes' rings,
// each on its own clock, become one timeline per packet on CLOCK_MONOTONIC_RAW,
// and each packet gets where it ended. A packet is what the wire names it:
// (underlay source, destination, destination QP, PSN, opcode); the copies a
// sender resent share it, and each record after a copy's tx is that copy's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/trace/trace_record.h"

namespace tandem::common::trace {

struct RingDump {
  std::string process;
  int64_t clock_offset_ns = 0;
  std::vector<Record> records;
};

struct Event {
  uint64_t t_ns = 0;  // CLOCK_MONOTONIC_RAW
  std::string process;
  Record r;
  uint32_t copy = 0;  // 1-based: the sender's transmission it follows (0: before any)
};

enum class Outcome : uint8_t {
  kDelivered,   // the receiver's core accepted a copy
  kDuplicate,   // only copies the core had accepted before (outside the trace) arrived
  kDropped,     // the last copy was dropped at `drop` (stage, verdict)
  kInFlight,    // sent, nothing seen after (still on its way, or lost where nothing traces)
  kUnknown,     // records but no transmission and no verdict
};
const char* outcome_name(Outcome o) noexcept;

struct PacketKey {
  uint32_t src_ip = 0, dst_ip = 0, dqpn = 0, psn = 0;
  uint8_t opcode = 0;
  auto operator<=>(const PacketKey&) const = default;
};

struct Timeline {
  PacketKey key;
  std::vector<Event> events;  // by time
  Outcome outcome = Outcome::kUnknown;
  uint32_t copies = 0;         // transmissions seen (retransmissions = copies - 1)
  uint32_t drops = 0;          // copies dropped on the way (any stage)
  bool foreign = false;        // arrived with no traced transmission (another sender)
  bool out_of_order = false;   // accepted ahead of a lower PSN of its QP (reordering)
  int drop = -1;  // index in events of the drop that ended it (kDropped)
  uint64_t first_ns = 0, end_ns = 0;  // first record; delivery (or last record)
};

struct Merged {
  std::vector<Timeline> packets;  // by first record
  std::map<std::string, uint64_t> outcomes;            // outcome name -> packets
  std::map<std::string, uint64_t> drops_at;            // "stage/verdict" -> copies dropped there
  std::map<std::string, std::vector<uint64_t>> hops;   // "stage>stage" -> latencies (ns) of delivered copies
  uint64_t records = 0;
};

// `verdict_name(stage, verdict)` names a verdict (DropReason or PathDrop).
using VerdictNamer = std::string (*)(Stage, uint8_t);
Merged merge(const std::vector<RingDump>& rings, VerdictNamer namer);

// p-th percentile (0..100) of xs (sorted in place); 0 for none.
uint64_t percentile(std::vector<uint64_t>& xs, double p);

}  // namespace tandem::common::trace
