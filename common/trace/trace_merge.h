// `tandemctl trace show`'s logic: the records of several processes' rings,
// each on its own clock, become one timeline per packet on CLOCK_MONOTONIC_RAW,
// and each packet gets where it ended. A packet is what the wire names it:
// (underlay source, destination, destination QP, PSN, opcode); the copies a
// sender resent share it, and each record after a copy's tx is that copy's.
// A transmission of the same name not flagged as a retransmission (a repeated
// ACK) starts a packet of its own. Set-up records (a punted table miss, the
// agent's resolution, the transaction that installed it) make one set-up per
// missed entry, which ends with the first traced packet between the two RNICs
// after the commit.
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
  uint64_t tsc_base = 0, tsc_mult = 0;  // RingHeader's: a TSC writer (0: use clock_offset_ns)
};

// One reader's measure of the TSC: cycles at anchor_ns (CLOCK_MONOTONIC_RAW) and the rate.
struct TscCalibration {
  uint64_t anchor_cycles = 0;
  int64_t anchor_ns = 0;
  double hz = 0;
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
  kEdge,        // no verdict, and some process's rule did not cover its time (the trace window's edge)
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
  bool foreign = false;        // arrived with no traced transmission (another sender), inside the window
  bool out_of_order = false;   // accepted ahead of a lower PSN of its QP (reordering)
  int drop = -1;  // index in events of the drop that ended it (kDropped)
  uint64_t first_ns = 0, end_ns = 0;  // first record; delivery (or last record)
};

enum class SetupOutcome : uint8_t {
  kDelivered,   // committed, and the first packet between the two RNICs after it was delivered
  kFirstLost,   // committed; that first packet was dropped (or is still on its way)
  kCommitted,   // committed; no traced packet after it
  kRefused,     // the agent refused it (or the punt was over budget) and nothing installed it since
  kAborted,     // the RNIC aborted the transaction
  kPunted,      // punted (and perhaps resolved), no commit traced yet
};
const char* setup_outcome_name(SetupOutcome o) noexcept;

struct Setup {
  uint32_t src_ip = 0;   // the RNIC whose egress entry it is (the one that punted)
  uint32_t dst_ip = 0;   // the remote underlay the agent resolved (0: not resolved)
  uint32_t vnic = 0;     // the missed key: local vNIC id and remote overlay address
  uint32_t overlay = 0;
  std::vector<Event> events;  // by time: punt(s), agent_resolve, txn_commit, then the first packet's
  SetupOutcome outcome = SetupOutcome::kPunted;
  int last_setup = -1;  // index in events of the last set-up record (the first packet's follow it)
  int first_packet = -1;  // index in Merged::packets
  uint64_t version = 0;  // committed table version (low 32 bits)
  uint64_t first_ns = 0, end_ns = 0;  // first record; the first packet's delivery (or last record)
};

struct Merged {
  std::vector<Timeline> packets;  // by first record
  std::vector<Setup> setups;      // by first record
  std::map<std::string, uint64_t> outcomes;            // outcome name -> packets
  std::map<std::string, uint64_t> drops_at;            // "stage/verdict" -> copies dropped there
  std::map<std::string, std::vector<uint64_t>> hops;   // "stage>stage" -> latencies (ns) of delivered copies
  std::map<std::string, uint64_t> setup_outcomes;      // set-up outcome name -> set-ups
  std::map<std::string, std::vector<uint64_t>> setup_hops;  // punt>agent_resolve, agent_resolve>txn_commit, punt>delivered
  uint64_t records = 0;
  // The time every process with packet records was recording: from the
  // latest first record to the earliest last one, a process's rings (one per
  // lcore, RingDump::process alike) taken together (set-up records are rare
  // and do not narrow it).
  uint64_t window_start_ns = 0, window_end_ns = 0;
};

// `verdict_name(stage, verdict)` names a verdict (DropReason or PathDrop).
// With `cal`, the records of TSC writers go back to cycles and onto
// CLOCK_MONOTONIC_RAW through it: processes whose own TSC rates were
// measured a little differently still agree to the cycle.
using VerdictNamer = std::string (*)(Stage, uint8_t);
Merged merge(const std::vector<RingDump>& rings, VerdictNamer namer, const TscCalibration* cal = nullptr);

// p-th percentile (0..100) of xs (sorted in place); 0 for none.
uint64_t percentile(std::vector<uint64_t>& xs, double p);

}  // namespace tandem::common::trace
