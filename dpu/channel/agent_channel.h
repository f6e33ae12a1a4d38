// The agent's per-RNIC communication state machine, sans-I/O. The agent's
// loop feeds it events from the RNIC's event ring, samples of the RNIC's BAR
// and the time; it produces commands for the command ring and outcomes
// (committed/aborted transactions, punts) for the agent.
//
//   DOWN --start, RNIC attached--> HELLO --HELLO_ACK--> SYNC --COMMITTED(replay)--> ACTIVE
//                     |                    \--digests equal (v2)----> ACTIVE
//                     |timeout              ACTIVE: one txn in flight at a time,
//                     v                     queued change sets merged into it
//   ACTIVE/SYNC --BAR heartbeat stalled, txn timeout, ERROR--> DEGRADED
//   DEGRADED --heartbeat back, or degraded_reset_ns--> RESET --next tick--> HELLO
//   RNIC restarted (BAR instance changed / back in AWAIT_HELLO) --> RESET
//   RESET, RNIC not attached --> DOWN (waiting; HELLO when it attaches)
//
// HELLO is only sent to an RNIC the BAR shows attached and alive (state not
// DOWN, an instance number, a heartbeat seen moving): an agent that starts
// before its workers waits in DOWN instead of timing HELLOs out against an
// empty ring (DEGRADED, RESET, HELLO, ... and a ring full of stale HELLOs for
// the worker to answer when it comes). A HELLO an attached RNIC leaves
// unanswered still degrades.
//
// A transaction in flight when the channel leaves ACTIVE is put back at the
// head of the queue; the re-HELLO's digest tells whether the RNIC still holds
// the agent's shadow (skip replay) or needs the full replay first. Queued
// change sets are merged into one transaction (all-or-nothing together). If
// the RNIC refuses one of several change sets on its merits (TABLE_FULL, bad
// entry), one tenant's entries must not fail another's: it is sent again in
// pieces, one per owner (ChangeSet::owner, the tenant) or else two halves,
// each piece a transaction of its own, until a refused piece is a single
// change set; only that one's outcome says refused. Each piece is smaller
// than its parent and never merged again, so a refused txn of k change sets
// costs at most 2k-2 more txns (with pipelining, each refused piece also
// bounces the one sent behind it at BEGIN, which goes again).
//
// Protocol versions: with an RNIC that negotiated less than v3, vNIC entries
// (EntryKind::kVnic) are left out of every transaction it is sent, and
// HELLO_ACK drops them from the shadow before comparing digests (the shadow
// stays exactly what that RNIC holds). Each successful HELLO starts a new
// session(): the caller reconciles the vNIC entries of a v3 session against
// level 1 (derive.h changes_for_vnics), which also fills in what an earlier
// v2 session left out.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/channel/layout.h"
#include "common/channel/messages.h"
#include "common/channel/negotiate.h"
#include "dpu/txn/change_set.h"
#include "dpu/txn/level2_shadow.h"
#include "dpu/txn/txn_builder.h"

namespace tandem::dpu {

using common::RawMessage;

enum class ChannelState : uint8_t { kDown, kHello, kSync, kActive, kDegraded, kReset };
const char* channel_state_name(ChannelState s) noexcept;

struct AgentChannelConfig {
  common::VersionRange versions = common::kOurVersions;
  uint32_t agent_instance = 1;                 // changes on every agent start
  uint64_t hello_timeout_ns = 500'000'000;     // HELLO unanswered -> DEGRADED
  uint64_t heartbeat_interval_ns = 100'000'000;  // agent HEARTBEAT commands
  uint64_t heartbeat_timeout_ns = 1'000'000'000; // BAR heartbeat unchanged -> DEGRADED
  uint64_t txn_timeout_ns = 2'000'000'000;     // COMMIT unanswered -> DEGRADED
  uint64_t degraded_reset_ns = 1'000'000'000;  // time in DEGRADED before RESET anyway
  std::size_t max_ops_per_txn = 4096;          // merge queued change sets up to this
  // Send the next txn while the previous one commits (two in flight): the
  // RNIC handles them in order, the second based on the first's version and
  // digest. If the first fails on its merits, the RNIC refuses the second at
  // BEGIN (base version) and its change sets go back to the queue's head.
  bool pipeline = false;
};

// What the agent reads from the RNIC's BAR page.
struct BarSample {
  common::RnicChannelState state = common::RnicChannelState::kDown;
  uint64_t heartbeat = 0;
  uint64_t rnic_instance = 0;
  std::optional<common::CommittedTable> table;  // nullopt if caught mid-update
};

BarSample sample_bar(const common::Bar& bar) noexcept;

struct TxnOutcome {
  uint32_t txn = 0;
  bool committed = false;
  bool replay = false;
  common::AbortReason reason = common::AbortReason::kNone;
  uint64_t version = 0;                          // committed version (or still current)
  common::TableDigest digest;                    // committed: the table at `version` (with
                                                 // pipelining the shadow may be ahead of it)
  std::vector<uint64_t> tags;                    // change sets it carried
  std::vector<common::Level2Entry> net_puts;     // for the store
  std::vector<common::EntryKey> net_dels;
};

struct AgentChannelStats {
  uint64_t hellos = 0;
  uint64_t replays = 0;
  uint64_t reconcile_skips = 0;   // digest matched: no replay needed
  uint64_t txns_committed = 0;
  uint64_t txns_aborted = 0;
  uint64_t table_full = 0;
  uint64_t degraded = 0;
  uint64_t resets = 0;
  uint64_t errors = 0;
  uint64_t stale_events = 0;
  uint64_t vnic_ops_withheld = 0;  // vNIC PUT/DELs not sent: the RNIC negotiated < v3
  uint64_t transport_resets = 0;   // the rings were replaced under the channel (transport_reset)
  uint64_t refusals_split = 0;     // txns of several change sets refused on their merits, sent again in pieces
  uint64_t split_txns = 0;         // txns those pieces took
  uint64_t change_sets_refused = 0;  // change sets refused in a txn of their own (their outcome says so)
};

class AgentChannel {
 public:
  AgentChannel(std::string rnic, const AgentChannelConfig& config, Level2Shadow shadow = {});

  void start(uint64_t now);
  void submit(ChangeSet cs);
  void on_event(const RawMessage& m, uint64_t now);
  void on_bar(const BarSample& s, uint64_t now);
  void tick(uint64_t now);
  // The rings under this channel were replaced (the agent found the old file
  // scribbled on and made a new one): what was in flight is requeued, the
  // BAR forgotten, and the channel waits in DOWN until a worker beats in the
  // new file's BAR; then HELLO and the digest reconcile, as after any reset.
  void transport_reset(uint64_t now, std::string why);

  bool pop_command(RawMessage& out);
  std::size_t pending_commands() const noexcept { return out_.size(); }
  std::vector<TxnOutcome> take_outcomes();
  std::vector<common::PuntMsg> take_punts();

  ChannelState state() const noexcept { return state_; }
  // Started, but no RNIC attached to the channel yet (or it went away): DOWN
  // until the BAR shows a live one.
  bool waiting_for_rnic() const noexcept { return started_ && state_ == ChannelState::kDown; }
  uint16_t version() const noexcept { return version_; }
  // Level-2 entries the RNIC said it can hold (HELLO_ACK); 0 before the first.
  uint32_t table_capacity() const noexcept { return table_capacity_; }
  // +1 per HELLO_ACK that negotiated a version (0: none yet).
  uint64_t session() const noexcept { return session_; }
  const Level2Shadow& shadow() const noexcept { return shadow_; }
  const std::string& rnic() const noexcept { return rnic_; }
  const std::string& last_error() const noexcept { return last_error_; }
  std::size_t queued_change_sets() const noexcept { return queue_.size(); }
  bool txn_in_flight() const noexcept { return inflight_.has_value(); }
  const AgentChannelStats& stats() const noexcept { return stats_; }

 private:
  void send(RawMessage m);
  void send_hello(uint64_t now);
  bool rnic_attached(uint64_t now) const noexcept;
  void enter(ChannelState s, uint64_t now);
  void degrade(uint64_t now, std::string why);
  void reset(uint64_t now);
  void requeue_inflight();
  void start_replay(uint64_t rnic_version, uint64_t now);
  void maybe_start_txn(uint64_t now);
  void append_ops_older(std::vector<Level2Op>& to, const Level2Op* b, const Level2Op* e);
  void split_refused(PendingTxn&& t);
  void advance_pipeline(uint64_t now);  // the head txn is answered: the pipelined one moves up
  void on_hello_ack(const common::HelloAckMsg& m, uint64_t now);
  void on_committed(const common::CommittedMsg& m, uint64_t now);
  void on_aborted(const common::AbortedMsg& m, uint64_t now);

  std::string rnic_;
  AgentChannelConfig config_;
  Level2Shadow shadow_;
  ChannelState state_ = ChannelState::kDown;
  uint16_t version_ = 0;
  uint32_t table_capacity_ = 0;
  uint64_t session_ = 0;
  uint32_t cmd_seq_ = 0;
  uint32_t next_txn_ = 1;
  uint64_t state_since_ = 0;
  uint64_t last_heartbeat_sent_ = 0;
  uint64_t hb_count_ = 0;
  uint64_t bar_heartbeat_ = 0;
  uint64_t bar_heartbeat_changed_ = 0;
  uint64_t rnic_instance_ = 0;
  bool bar_seen_ = false;
  bool started_ = false;
  bool bar_beating_ = false;        // heartbeat seen moving since this instance appeared
  common::RnicChannelState bar_state_ = common::RnicChannelState::kDown;
  bool degraded_by_stall_ = false;  // DEGRADED because the BAR heartbeat stopped
  uint64_t txn_sent_at_ = 0;
  // A submitted change set keeps its one tag and owner inline (no vector per
  // new flow); a txn of several put back at the queue's head, or a piece of
  // a refused one, keeps each one's tag, owner and end in ops.
  struct Several {
    std::vector<uint64_t> tags;
    std::vector<MergedSet> sets;
  };
  struct Queued {
    uint64_t tag = 0;                 // one change set: its tag and owner
    uint32_t owner = 0;
    bool alone = false;               // a piece of a refused txn: sent as a txn of its own
    std::unique_ptr<Several> several;  // or several (null: one)
    std::vector<Level2Op> ops;
  };
  static Queued requeued(PendingTxn&& t);
  void append_several(std::vector<Level2Op>& ops, std::vector<uint64_t>& tags, const Queued& q);
  std::optional<PendingTxn> inflight_;
  std::optional<PendingTxn> next_;  // pipelined behind inflight_ (config_.pipeline)
  std::deque<Queued> queue_;
  std::vector<MergedSet> merging_;  // maybe_start_txn's, reused: no allocation for a txn of one change set
  std::deque<RawMessage> out_;
  std::vector<TxnOutcome> outcomes_;
  std::vector<common::PuntMsg> punts_;
  std::string last_error_;
  AgentChannelStats stats_;
};

}  // namespace tandem::dpu
