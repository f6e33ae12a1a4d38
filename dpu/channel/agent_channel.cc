// Agent-side channel state machine.
#include "dpu/channel/agent_channel.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace tandem::dpu {

using namespace tandem::common;

const char* channel_state_name(ChannelState s) noexcept {
  switch (s) {
    case ChannelState::kDown: return "DOWN";
    case ChannelState::kHello: return "HELLO";
    case ChannelState::kSync: return "SYNC";
    case ChannelState::kActive: return "ACTIVE";
    case ChannelState::kDegraded: return "DEGRADED";
    case ChannelState::kReset: return "RESET";
  }
  return "?";
}

BarSample sample_bar(const Bar& bar) noexcept {
  BarSample s;
  s.state = static_cast<RnicChannelState>(bar.state.value.load(std::memory_order_acquire));
  s.heartbeat = bar.heartbeat.value.load(std::memory_order_acquire);
  s.rnic_instance = bar.rnic_instance.value.load(std::memory_order_acquire);
  s.table = bar_read_table(bar);
  return s;
}

AgentChannel::AgentChannel(std::string rnic, const AgentChannelConfig& config, Level2Shadow shadow)
    : rnic_(std::move(rnic)), config_(config), shadow_(std::move(shadow)) {}

void AgentChannel::send(RawMessage m) {
  m.set_seq(cmd_seq_++);
  out_.push_back(m);
}

bool AgentChannel::pop_command(RawMessage& out) {
  if (out_.empty()) return false;
  out = out_.front();
  out_.pop_front();
  return true;
}

std::vector<TxnOutcome> AgentChannel::take_outcomes() { return std::exchange(outcomes_, {}); }
std::vector<PuntMsg> AgentChannel::take_punts() { return std::exchange(punts_, {}); }

void AgentChannel::enter(ChannelState s, uint64_t now) {
  state_ = s;
  state_since_ = now;
  if (s == ChannelState::kActive) {
    // The first HEARTBEAT tells the RNIC it is synchronised.
    HeartbeatMsg hb;
    hb.counter = ++hb_count_;
    hb.agent_version = shadow_.version();
    send(to_raw(hb));
    last_heartbeat_sent_ = now;
    maybe_start_txn(now);
  }
}

void AgentChannel::start(uint64_t now) {
  if (started_) return;
  started_ = true;
  bar_heartbeat_changed_ = now;
  if (rnic_attached(now)) send_hello(now);  // else tick() sends it once the RNIC shows up
}

// A worker that is attached and running: its BAR names a state and an
// instance, and its heartbeat moved recently. A BAR left behind by a dead
// worker (re-opened channel file) has a frozen heartbeat and does not count.
bool AgentChannel::rnic_attached(uint64_t now) const noexcept {
  return bar_seen_ && bar_state_ != RnicChannelState::kDown && rnic_instance_ != 0 && bar_beating_ &&
         now - bar_heartbeat_changed_ <= config_.heartbeat_timeout_ns;
}

void AgentChannel::send_hello(uint64_t now) {
  HelloMsg h;
  h.oldest_version = config_.versions.oldest;
  h.current_version = config_.versions.current;
  h.agent_instance = config_.agent_instance;
  send(to_raw(h));
  ++stats_.hellos;
  version_ = 0;
  enter(ChannelState::kHello, now);
}

void AgentChannel::submit(ChangeSet cs) {
  queue_.push_back(Queued{cs.tag, cs.owner, false, nullptr, std::move(cs.ops)});
}

AgentChannel::Queued AgentChannel::requeued(PendingTxn&& t) {
  if (t.tags.size() == 1) return Queued{t.tags[0], t.owner, t.alone, nullptr, std::move(t.ops)};
  return Queued{0, 0, t.alone, std::make_unique<Several>(Several{std::move(t.tags), std::move(t.sets)}),
                std::move(t.ops)};
}

void AgentChannel::requeue_inflight() {
  if (next_) queue_.push_front(requeued(std::move(*next_)));
  next_.reset();
  if (inflight_ && !inflight_->replay) queue_.push_front(requeued(std::move(*inflight_)));
  inflight_.reset();
}

void AgentChannel::degrade(uint64_t now, std::string why) {
  last_error_ = std::move(why);
  if (state_ == ChannelState::kDegraded) return;
  degraded_by_stall_ = false;
  requeue_inflight();
  out_.clear();  // unsent commands of an abandoned txn; RESET discards the sent ones
  ++stats_.degraded;
  enter(ChannelState::kDegraded, now);
}

void AgentChannel::reset(uint64_t now) {
  requeue_inflight();
  out_.clear();
  ResetMsg r;
  send(to_raw(r));
  ++stats_.resets;
  enter(ChannelState::kReset, now);
}

void AgentChannel::transport_reset(uint64_t now, std::string why) {
  last_error_ = std::move(why);
  requeue_inflight();
  out_.clear();  // meant for the old rings
  ++stats_.transport_resets;
  version_ = 0;
  bar_seen_ = false;
  bar_beating_ = false;
  rnic_instance_ = 0;
  bar_state_ = RnicChannelState::kDown;
  degraded_by_stall_ = false;
  enter(ChannelState::kDown, now);
}

void AgentChannel::start_replay(uint64_t rnic_version, uint64_t now) {
  // A pipelined txn already sent may still commit on the RNIC (one version
  // more) before the replay arrives: the replay must land above it.
  const uint64_t ahead = next_ ? 1 : 0;
  requeue_inflight();
  uint64_t v = std::max(rnic_version + ahead, shadow_.version()) + 1;
  std::deque<RawMessage> msgs;
  inflight_ = TxnBuilder::build_replay(shadow_, next_txn_++, v, msgs);
  for (auto& m : msgs) send(m);
  txn_sent_at_ = now;
  ++stats_.replays;
  state_ = ChannelState::kSync;
  state_since_ = now;
}

// Appends what an older RNIC can take: it keeps its own vNICs (no vNIC
// entries below v3) and leaves them unpartitioned (no partition keys below v4).
void AgentChannel::append_ops_older(std::vector<Level2Op>& to, const Level2Op* b, const Level2Op* e) {
  const bool vnics = has_vnic_entries(version_);
  for (; b != e; ++b) {
    if (b->entry.key.kind != EntryKind::kVnic) {
      to.push_back(*b);
    } else if (!vnics) {
      ++stats_.vnic_ops_withheld;
    } else {
      to.push_back(*b);
      to.back().entry.vnic.pkey = 0;
    }
  }
}

// A queued txn of several change sets (requeued, or a piece) into the merge.
void AgentChannel::append_several(std::vector<Level2Op>& ops, std::vector<uint64_t>& tags, const Queued& q) {
  const Several& s = *q.several;
  for (std::size_t i = 0, from = 0; i < s.tags.size(); from = s.sets[i++].end) {
    if (has_vnic_entries(version_) && has_partition_keys(version_))
      ops.insert(ops.end(), q.ops.begin() + from, q.ops.begin() + s.sets[i].end);
    else
      append_ops_older(ops, q.ops.data() + from, q.ops.data() + s.sets[i].end);
    tags.push_back(s.tags[i]);
    merging_.push_back({s.sets[i].owner, static_cast<uint32_t>(ops.size())});
  }
}

void AgentChannel::maybe_start_txn(uint64_t now) {
  if (state_ != ChannelState::kActive || queue_.empty()) return;
  const bool behind = inflight_.has_value();  // pipelined behind the txn in flight
  if (behind && (!config_.pipeline || next_ || inflight_->replay)) return;
  std::vector<Level2Op> ops;
  std::vector<uint64_t> tags;
  merging_.clear();
  const bool current = has_vnic_entries(version_) && has_partition_keys(version_);
  // Merge queued change sets into one txn: one round trip for many new flows
  // (a piece of a refused txn goes alone).
  const bool alone = queue_.front().alone;
  while (!queue_.empty()) {
    Queued& q = queue_.front();
    if (!tags.empty() && (alone || q.alone || ops.size() + q.ops.size() > config_.max_ops_per_txn)) break;
    if (q.several) [[unlikely]] {
      append_several(ops, tags, q);
    } else {
      if (current) [[likely]]
        ops.insert(ops.end(), q.ops.begin(), q.ops.end());
      else
        append_ops_older(ops, q.ops.data(), q.ops.data() + q.ops.size());
      tags.push_back(q.tag);
      merging_.push_back({q.owner, static_cast<uint32_t>(ops.size())});
    }
    queue_.pop_front();
  }
  if (alone) ++stats_.split_txns;
  std::deque<RawMessage> msgs;
  PendingTxn t = behind ? TxnBuilder::build_after(shadow_, *inflight_, next_txn_++, std::move(ops), msgs)
                        : TxnBuilder::build(shadow_, next_txn_++, std::move(ops), msgs);
  t.tags = std::move(tags);
  if (t.tags.size() > 1)
    t.sets.assign(merging_.begin(), merging_.end());
  else
    t.owner = merging_[0].owner;
  t.alone = alone;
  if (behind) {
    next_ = std::move(t);
  } else {
    inflight_ = std::move(t);
    txn_sent_at_ = now;
  }
  for (auto& m : msgs) send(m);
}

// A refused txn of several change sets. Which one the RNIC could not take
// is not asked of it: the entry that did not fit need not be the one that
// filled its bucket, and a worker may lie. So the change sets go again in
// pieces at the queue's head: one per owner, in order of first appearance
// (across tenants order does not matter: a level-1 change set is derived
// from the committed shadow and a resolution in flight is revalidated when
// it commits, derive.h), or, with one owner, two halves in order.
void AgentChannel::split_refused(PendingTxn&& t) {
  ++stats_.refusals_split;
  const std::size_t k = t.tags.size();
  std::vector<std::vector<uint32_t>> groups;  // change-set indices per piece
  std::unordered_map<uint32_t, std::size_t> group_of;
  for (uint32_t i = 0; i < k; ++i) {
    auto [it, fresh] = group_of.try_emplace(t.sets[i].owner, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  if (groups.size() == 1) {
    std::vector<uint32_t>& all = groups[0];
    groups.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(k / 2), all.end());
    groups[0].resize(k / 2);
  }
  for (auto g = groups.rbegin(); g != groups.rend(); ++g) {
    PendingTxn piece;  // as requeued: one change set inline, several with their spans
    piece.alone = true;
    for (uint32_t i : *g) {
      const uint32_t from = i ? t.sets[i - 1].end : 0;
      piece.ops.insert(piece.ops.end(), t.ops.begin() + from, t.ops.begin() + t.sets[i].end);
      piece.tags.push_back(t.tags[i]);
      piece.sets.push_back({t.sets[i].owner, static_cast<uint32_t>(piece.ops.size())});
    }
    piece.owner = piece.sets[0].owner;
    queue_.push_front(requeued(std::move(piece)));
  }
}

void AgentChannel::advance_pipeline(uint64_t now) {
  inflight_ = std::move(next_);
  next_.reset();
  if (inflight_) txn_sent_at_ = now;  // its answer can only come after the previous one's
}

void AgentChannel::on_event(const RawMessage& m, uint64_t now) {
  switch (m.type()) {
    case MessageType::kHelloAck: on_hello_ack(as<HelloAckMsg>(m), now); break;
    case MessageType::kCommitted: on_committed(as<CommittedMsg>(m), now); break;
    case MessageType::kAborted: on_aborted(as<AbortedMsg>(m), now); break;
    case MessageType::kTableFull: ++stats_.table_full; break;
    case MessageType::kPunt: punts_.push_back(as<PuntMsg>(m)); break;
    case MessageType::kError: {
      auto e = as<ErrorMsg>(m);
      ++stats_.errors;
      // Errors about commands sent before the latest HELLO (or left in the
      // ring for a worker that has not said hello yet) are expected noise.
      if (state_ == ChannelState::kHello || state_ == ChannelState::kReset || state_ == ChannelState::kDown) break;
      degrade(now, "RNIC " + rnic_ + " reported channel error " +
                       std::to_string(static_cast<int>(e.code)) + " for command seq " +
                       std::to_string(e.offending_seq));
      break;
    }
    default: ++stats_.stale_events; break;
  }
}

void AgentChannel::on_hello_ack(const HelloAckMsg& m, uint64_t now) {
  if (state_ != ChannelState::kHello || m.agent_instance != config_.agent_instance) {
    ++stats_.stale_events;
    return;
  }
  if (m.chosen_version == 0) {
    degrade(now, "no common protocol version: agent " + std::to_string(config_.versions.oldest) + ".." +
                     std::to_string(config_.versions.current) + ", RNIC " + rnic_ + " " +
                     std::to_string(m.oldest_version) + ".." + std::to_string(m.current_version));
    return;
  }
  version_ = m.chosen_version;
  table_capacity_ = m.table_capacity;
  shadow_.presize(m.table_capacity);
  ++session_;
  // The shadow is what the RNIC holds; one below v3 holds no vNIC entries.
  if (!has_vnic_entries(version_)) shadow_.forget(EntryKind::kVnic);
  bool same = m.committed_version == shadow_.version() && m.digest == shadow_.digest().value &&
              m.entry_count == shadow_.digest().count;
  if (has_digest_reconcile(version_) && same) {
    ++stats_.reconcile_skips;
    enter(ChannelState::kActive, now);
    return;
  }
  start_replay(m.committed_version, now);
}

void AgentChannel::on_committed(const CommittedMsg& m, uint64_t now) {
  if (!inflight_ || m.txn != inflight_->txn) {
    ++stats_.stale_events;
    return;
  }
  bool ok = m.version == inflight_->version;
  if (has_digest_reconcile(version_))
    ok = ok && m.digest == inflight_->expected.value && m.entry_count == inflight_->expected.count;
  if (!ok) {
    // The RNIC holds something other than what we think: replay our shadow,
    // then retry these ops (start_replay requeues them).
    last_error_ = "RNIC " + rnic_ + " committed txn " + std::to_string(m.txn) + " with an unexpected table";
    start_replay(m.version, now);
    return;
  }
  TxnOutcome o;
  o.txn = m.txn;
  o.committed = true;
  o.replay = inflight_->replay;
  o.version = m.version;
  o.digest = inflight_->expected;
  o.tags = std::move(inflight_->tags);
  if (inflight_->replay) {
    shadow_.set_version(m.version);
  } else {
    shadow_.apply(inflight_->ops, m.version, &o.net_puts, &o.net_dels);
  }
  ++stats_.txns_committed;
  outcomes_.push_back(std::move(o));
  bool was_replay = inflight_->replay;
  advance_pipeline(now);
  if (was_replay && state_ == ChannelState::kSync)
    enter(ChannelState::kActive, now);
  else
    maybe_start_txn(now);
}

void AgentChannel::on_aborted(const AbortedMsg& m, uint64_t now) {
  if (!inflight_ || m.txn != inflight_->txn) {
    ++stats_.stale_events;
    return;
  }
  ++stats_.txns_aborted;
  TxnOutcome o;
  o.txn = m.txn;
  o.replay = inflight_->replay;
  o.reason = m.reason;
  o.version = m.committed_version;
  o.tags = inflight_->tags;
  switch (m.reason) {
    case AbortReason::kVersionMismatch:
    case AbortReason::kDigestMismatch:
    case AbortReason::kTxnMismatch:
      // Our shadow and the RNIC disagree: replay, then retry the same ops.
      if (inflight_->replay) {
        inflight_.reset();
        degrade(now, "replay to RNIC " + rnic_ + " aborted (reason " + std::to_string(int(m.reason)) + ")");
      } else {
        start_replay(m.committed_version, now);  // requeues the ops first
      }
      return;
    case AbortReason::kHeadless:
      reset(now);
      return;
    default:
      break;
  }
  // Refused on its merits (table full, bad entry, requested).
  PendingTxn refused = std::move(*inflight_);
  inflight_.reset();
  // A txn pipelined behind it was based on its version: the RNIC refuses it
  // at BEGIN (its ABORTED then matches nothing and counts as stale); send its
  // change sets again first, on the version the RNIC still has.
  if (next_) queue_.push_front(requeued(std::move(*next_)));
  next_.reset();
  if (refused.replay) {
    outcomes_.push_back(std::move(o));
    degrade(now, "replay to RNIC " + rnic_ + " aborted: the table does not fit (reason " +
                     std::to_string(int(m.reason)) + ")");
    return;
  }
  if (refused.tags.size() > 1) {
    split_refused(std::move(refused));  // no outcome yet: its pieces go first
  } else {
    stats_.change_sets_refused += refused.tags.size();
    outcomes_.push_back(std::move(o));  // that change set itself does not fit: report it
  }
  maybe_start_txn(now);
}

void AgentChannel::on_bar(const BarSample& s, uint64_t now) {
  bar_state_ = s.state;
  if (!bar_seen_) {
    bar_seen_ = true;
    rnic_instance_ = s.rnic_instance;
    bar_heartbeat_ = s.heartbeat;
    bar_heartbeat_changed_ = now;
    return;
  }
  if (s.rnic_instance != rnic_instance_) {
    // The RNIC restarted: whatever we think it holds, re-HELLO and reconcile.
    // A new instance number is written by a worker that just started.
    rnic_instance_ = s.rnic_instance;
    bar_heartbeat_ = s.heartbeat;
    bar_heartbeat_changed_ = now;
    bar_beating_ = s.rnic_instance != 0;
    if (state_ != ChannelState::kDown && state_ != ChannelState::kHello) reset(now);
    return;
  }
  if (s.heartbeat != bar_heartbeat_) {
    bar_heartbeat_ = s.heartbeat;
    bar_heartbeat_changed_ = now;
    bar_beating_ = true;
    // It is alive again; other degradations wait for degraded_reset_ns.
    if (state_ == ChannelState::kDegraded && degraded_by_stall_) reset(now);
  }
}

void AgentChannel::tick(uint64_t now) {
  switch (state_) {
    case ChannelState::kDown:
      if (started_ && rnic_attached(now)) send_hello(now);
      break;
    case ChannelState::kHello:
      if (now - state_since_ > config_.hello_timeout_ns) degrade(now, "HELLO to RNIC " + rnic_ + " unanswered");
      break;
    case ChannelState::kSync:
    case ChannelState::kActive:
      if (bar_seen_ && now - bar_heartbeat_changed_ > config_.heartbeat_timeout_ns) {
        degrade(now, "RNIC " + rnic_ + " heartbeat stalled");
        degraded_by_stall_ = true;
        break;
      }
      if (inflight_ && now - txn_sent_at_ > config_.txn_timeout_ns) {
        degrade(now, "txn " + std::to_string(inflight_->txn) + " to RNIC " + rnic_ + " unanswered");
        break;
      }
      if (now - last_heartbeat_sent_ >= config_.heartbeat_interval_ns) {
        HeartbeatMsg hb;
        hb.counter = ++hb_count_;
        hb.agent_version = shadow_.version();
        send(to_raw(hb));
        last_heartbeat_sent_ = now;
      }
      maybe_start_txn(now);  // change sets submitted since the last call
      break;
    case ChannelState::kDegraded:
      if (now - state_since_ > config_.degraded_reset_ns) reset(now);
      break;
    case ChannelState::kReset:
      if (rnic_attached(now)) {
        send_hello(now);
      } else {
        version_ = 0;
        enter(ChannelState::kDown, now);  // no worker to talk to: wait for one, quietly
      }
      break;
  }
}

}  // namespace tandem::dpu
