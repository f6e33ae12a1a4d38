// The RNIC end of the DPU channel, sans-I/O: consumes command messages, drives
// the level-2 table's transactions, produces event messages, and keeps what the
// BAR shows. The worker's I/O loop moves messages between the rings and this
// object, calls tick(now) each loop, and copies bar() into the shared page.
//
// States (mirrored in the BAR): AWAIT_HELLO -> (HELLO) -> SYNC -> (first
// HEARTBEAT or commit) -> ACTIVE; no command from the agent for agent_timeout
// -> HEADLESS: the committed table stays in use for forwarding, an open
// transaction is discarded and new tenant state is refused until a new HELLO.
//
// vNICs (protocol v3): the vNIC entries the table commits are mirrored in a
// VnicList (vnics()); vnics_from_agent() says whether the agent this RNIC
// last negotiated with programs them (v3) or not (an older agent: the worker
// keeps the vNICs of its own configuration). vNIC entries on a channel that
// negotiated v1/v2 are refused as kBadEntry.
#pragma once

#include <cstdint>
#include <deque>

#include "common/channel/layout.h"
#include "common/channel/messages.h"
#include "common/channel/negotiate.h"
#include "rnic/table/level2_table.h"
#include "rnic/table/reader_epochs.h"
#include "rnic/table/vnic_list.h"

namespace tandem::rnic {

using common::RawMessage;
using common::RnicChannelState;

struct RnicChannelConfig {
  common::VersionRange versions = common::kOurVersions;
  uint64_t agent_timeout_ns = 3'000'000'000;  // silence after which the RNIC goes headless
  uint64_t rnic_instance = 1;                 // changes on every RNIC start
  // Packet threads reading the table; tick() reclaims what none of them can
  // reach. nullptr: the packets are processed on this thread between calls,
  // so nothing is ever in use during tick().
  const ReclaimBound* readers = nullptr;
};

struct RnicChannelStats {
  uint64_t commands = 0;
  uint64_t commits = 0;
  uint64_t aborts = 0;
  uint64_t table_full = 0;
  uint64_t refused_headless = 0;
  uint64_t sequence_gaps = 0;
  uint64_t errors = 0;
  uint64_t headless_entries = 0;
  uint64_t vnic_entries_refused = 0;  // vNIC PUT/DEL on a channel below v3 (a misbehaving agent)
};

class RnicChannel {
 public:
  RnicChannel(Level2Table& table, const RnicChannelConfig& config);

  void on_command(const RawMessage& m, uint64_t now) noexcept;
  // The same for a burst, in order, with the table's buckets and records for
  // later PUT/DELs prefetched while earlier ones are applied.
  void on_commands(const RawMessage* m, std::size_t n, uint64_t now) noexcept;
  // Heartbeat, agent-silence check, and reclamation of removed table entries.
  void tick(uint64_t now) noexcept;
  bool pop_event(RawMessage& out) noexcept;
  // The next event pop_event() would give, or nullptr (the worker holds a
  // COMMITTED back until every lcore sees the version: rnic/port/commit_fanout.h).
  const RawMessage* peek_event() const noexcept { return out_.empty() ? nullptr : &out_.front(); }
  std::size_t pending_events() const noexcept { return out_.size(); }

  // The worker mapped a new channel file (the agent replaced the old one):
  // an open transaction is dropped, events meant for the old rings are
  // forgotten, and the channel waits for the agent's HELLO. The committed
  // table and vNIC list stay in use, as in HEADLESS.
  void rings_replaced() noexcept;

  // A missed packet for the agent; its headers are already in slot `slot`.
  void punt(uint32_t slot, uint32_t generation, uint16_t length, uint16_t port,
            const common::EntryKey& missed) noexcept;

  RnicChannelState state() const noexcept { return state_; }
  uint16_t negotiated_version() const noexcept { return version_; }
  uint64_t heartbeat() const noexcept { return heartbeat_; }
  const RnicChannelStats& stats() const noexcept { return stats_; }
  // The committed table's vNIC entries, and whether the agent sends them.
  const VnicList& vnics() const noexcept { return vnics_; }
  bool vnics_from_agent() const noexcept { return vnics_from_agent_; }
  // Writes state, heartbeat, negotiated version, committed table and counters.
  // `shown`: the committed table to show instead of the table's own (the
  // newest one every lcore sees, when COMMITTED waits for them).
  void publish(common::Bar& bar, const common::CommittedTable* shown = nullptr) const noexcept;

 private:
  template <class M>
  void emit(M m) noexcept;
  void abort_open(common::AbortReason reason, uint32_t txn, uint32_t op_index) noexcept;
  void on_hello(const common::HelloMsg& m) noexcept;
  void on_begin(uint32_t txn, uint64_t base, bool from_empty) noexcept;
  void on_op(uint32_t txn, TableStatus st, const common::EntryKey& key) noexcept;
  void on_commit(const common::CommitMsg& m, bool sync_end) noexcept;
  // vNIC entries exist from v3 on, partition keys in them from v4: an agent
  // that negotiated less never sends them.
  bool vnic_refused(const common::EntryKey& k) noexcept {
    if (k.kind != common::EntryKind::kVnic || common::has_vnic_entries(version_)) return false;
    ++stats_.vnic_entries_refused;
    return true;
  }
  bool vnic_refused(const common::Level2Entry& e) noexcept {
    if (vnic_refused(e.key)) return true;
    if (e.key.kind != common::EntryKind::kVnic || e.vnic.pkey == 0 || common::has_partition_keys(version_))
      return false;
    ++stats_.vnic_entries_refused;
    return true;
  }
  bool accepts_state() const noexcept {
    return state_ == RnicChannelState::kSync || state_ == RnicChannelState::kActive;
  }

  Level2Table& table_;
  RnicChannelConfig config_;
  RnicChannelState state_ = RnicChannelState::kAwaitHello;
  uint16_t version_ = 0;
  uint32_t agent_instance_ = 0;
  uint64_t last_agent_ns_ = 0;
  bool agent_seen_ = false;
  uint32_t next_cmd_seq_ = 0;
  uint32_t event_seq_ = 0;
  uint64_t heartbeat_ = 0;
  bool txn_open_ = false;
  bool txn_is_sync_ = false;
  uint32_t txn_ = 0;
  uint32_t op_index_ = 0;
  bool doomed_ = false;       // txn_ was refused; its remaining commands are ignored
  VnicList vnics_;
  // The last agent that said HELLO negotiated v3+ (kept through HEADLESS).
  bool vnics_from_agent_ = false;
  std::deque<RawMessage> out_;
  RnicChannelStats stats_;
};

}  // namespace tandem::rnic
