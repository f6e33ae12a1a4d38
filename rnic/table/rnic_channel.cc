// RNIC-side command processing for the DPU channel.
#include "rnic/table/rnic_channel.h"

#include <cstddef>
#include <cstring>

namespace tandem::rnic {

using namespace tandem::common;

RnicChannel::RnicChannel(Level2Table& table, const RnicChannelConfig& config)
    : table_(table), config_(config) {}

template <class M>
void RnicChannel::emit(M m) noexcept {
  m.hdr.seq = event_seq_++;
  out_.push_back(to_raw(m));
}

bool RnicChannel::pop_event(RawMessage& out) noexcept {
  if (out_.empty()) return false;
  out = out_.front();
  out_.pop_front();
  return true;
}

void RnicChannel::abort_open(AbortReason reason, uint32_t txn, uint32_t op_index) noexcept {
  if (txn_open_) {
    table_.abort();
    vnics_.abort();
  }
  txn_open_ = false;
  doomed_ = true;
  txn_ = txn;
  AbortedMsg a;
  a.txn = txn;
  a.reason = reason;
  a.op_index = op_index;
  a.committed_version = table_.version();
  emit(a);
  ++stats_.aborts;
}

namespace {
// The table key a PUT or DEL names, read straight from the message bytes.
bool op_key(const RawMessage& m, EntryKey& k) noexcept {
  if (m.type() == MessageType::kPut) {
    std::memcpy(&k, m.bytes + offsetof(PutMsg, entry) + offsetof(Level2Entry, key), sizeof k);
    return true;
  }
  if (m.type() == MessageType::kDel) {
    std::memcpy(&k, m.bytes + offsetof(DelMsg, key), sizeof k);
    return true;
  }
  return false;
}
}  // namespace

void RnicChannel::on_commands(const RawMessage* m, std::size_t n, uint64_t now) noexcept {
  // Buckets kBuckets ops ahead, the record of a tag match kRecords ahead (by
  // then its buckets have arrived): a PUT's misses overlap with the ops before it.
  constexpr std::size_t kBuckets = 8, kRecords = 4;
  EntryKey k;
  for (std::size_t i = 0; i < n && i < kBuckets; ++i)
    if (op_key(m[i], k)) table_.prefetch(k);
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kBuckets < n && op_key(m[i + kBuckets], k)) table_.prefetch(k);
    if (i + kRecords < n && op_key(m[i + kRecords], k)) table_.prefetch_match(k);
    on_command(m[i], now);
  }
}

void RnicChannel::on_command(const RawMessage& raw, uint64_t now) noexcept {
  ++stats_.commands;
  last_agent_ns_ = now;
  agent_seen_ = true;
  MessageType t = raw.type();

  if (t == MessageType::kHello) {
    on_hello(as<HelloMsg>(raw));
    next_cmd_seq_ = raw.seq() + 1;
    return;
  }
  if (t == MessageType::kReset) {
    if (txn_open_) {
      table_.abort();
      vnics_.abort();
    }
    txn_open_ = false;
    doomed_ = false;
    state_ = RnicChannelState::kAwaitHello;
    version_ = 0;
    return;
  }
  if (state_ == RnicChannelState::kHeadless &&
      (t == MessageType::kBegin || t == MessageType::kSyncStart)) {
    // New tenant state needs a fresh HELLO from a live agent.
    ++stats_.refused_headless;
    abort_open(AbortReason::kHeadless, t == MessageType::kBegin ? as<BeginMsg>(raw).txn
                                                                 : as<SyncStartMsg>(raw).txn, 0);
    return;
  }
  if (state_ == RnicChannelState::kAwaitHello || state_ == RnicChannelState::kHeadless || version_ == 0) {
    ErrorMsg e;
    e.code = ChannelError::kNotNegotiated;
    e.offending_seq = raw.seq();
    e.offending_type = t;
    emit(e);
    ++stats_.errors;
    return;
  }
  if (raw.seq() != next_cmd_seq_) {
    // A lost or duplicated command: nothing staged can be trusted any more.
    ++stats_.sequence_gaps;
    if (txn_open_) abort_open(AbortReason::kTxnMismatch, txn_, op_index_);
    ErrorMsg e;
    e.code = ChannelError::kSequenceGap;
    e.offending_seq = raw.seq();
    e.offending_type = t;
    emit(e);
    ++stats_.errors;
  }
  next_cmd_seq_ = raw.seq() + 1;

  switch (t) {
    case MessageType::kHeartbeat:
      if (state_ == RnicChannelState::kSync) state_ = RnicChannelState::kActive;
      break;
    case MessageType::kBegin: {
      auto m = as<BeginMsg>(raw);
      on_begin(m.txn, m.base_version, false);
      break;
    }
    case MessageType::kSyncStart: {
      auto m = as<SyncStartMsg>(raw);
      on_begin(m.txn, m.base_version, true);
      break;
    }
    case MessageType::kPut: {
      auto m = as<PutMsg>(raw);
      bool mine = txn_open_ && m.txn == txn_;
      TableStatus st = TableStatus::kNoTxn;
      if (mine) st = vnic_refused(m.entry) ? TableStatus::kBadEntry : table_.put(m.entry);
      if (st == TableStatus::kOk && m.entry.key.kind == EntryKind::kVnic) vnics_.put(m.entry.vnic);
      on_op(m.txn, st, m.entry.key);
      break;
    }
    case MessageType::kDel: {
      auto m = as<DelMsg>(raw);
      bool mine = txn_open_ && m.txn == txn_;
      TableStatus st = TableStatus::kNoTxn;
      if (mine) st = vnic_refused(m.key) ? TableStatus::kBadEntry : table_.del(m.key);
      if (st == TableStatus::kOk && m.key.kind == EntryKind::kVnic) vnics_.del(m.key.word0);
      on_op(m.txn, st, m.key);
      break;
    }
    case MessageType::kCommit:
    case MessageType::kSyncEnd:
      on_commit(as<CommitMsg>(raw), t == MessageType::kSyncEnd);
      break;
    case MessageType::kAbort: {
      auto m = as<AbortMsg>(raw);
      if (txn_open_ && m.txn == txn_) abort_open(AbortReason::kRequested, m.txn, op_index_);
      break;
    }
    default: {
      ErrorMsg e;
      e.code = ChannelError::kUnknownMessage;
      e.offending_seq = raw.seq();
      e.offending_type = t;
      emit(e);
      ++stats_.errors;
      break;
    }
  }
}

void RnicChannel::rings_replaced() noexcept {
  if (txn_open_) {
    table_.abort();
    vnics_.abort();
  }
  txn_open_ = false;
  doomed_ = false;
  out_.clear();
  state_ = RnicChannelState::kAwaitHello;
  version_ = 0;
}

void RnicChannel::on_hello(const HelloMsg& m) noexcept {
  auto v = negotiate_version(config_.versions, VersionRange{m.oldest_version, m.current_version});
  HelloAckMsg ack;
  ack.oldest_version = config_.versions.oldest;
  ack.current_version = config_.versions.current;
  ack.agent_instance = m.agent_instance;
  ack.table_capacity = table_.capacity();
  if (txn_open_) {  // a (re)starting agent never finishes the old txn
    table_.abort();
    vnics_.abort();
  }
  txn_open_ = false;
  doomed_ = false;
  if (!v) {
    ack.chosen_version = 0;
    version_ = 0;
    if (state_ != RnicChannelState::kHeadless) state_ = RnicChannelState::kAwaitHello;
  } else {
    ack.chosen_version = *v;
    version_ = *v;
    vnics_from_agent_ = has_vnic_entries(*v);
    agent_instance_ = m.agent_instance;
    state_ = RnicChannelState::kSync;
  }
  ack.committed_version = table_.version();
  ack.digest = table_.digest().value;
  ack.entry_count = table_.digest().count;
  emit(ack);
}

void RnicChannel::on_begin(uint32_t txn, uint64_t base, bool from_empty) noexcept {
  doomed_ = false;
  if (!accepts_state()) {
    ++stats_.refused_headless;
    abort_open(AbortReason::kHeadless, txn, 0);
    return;
  }
  if (txn_open_) {
    abort_open(AbortReason::kTxnMismatch, txn, 0);  // also discards the one left open
    return;
  }
  if (!from_empty && base != table_.version()) {
    abort_open(AbortReason::kVersionMismatch, txn, 0);
    return;
  }
  table_.begin(from_empty);
  vnics_.begin(from_empty);
  txn_open_ = true;
  txn_is_sync_ = from_empty;
  txn_ = txn;
  op_index_ = 0;
}

void RnicChannel::on_op(uint32_t txn, TableStatus st, const EntryKey& key) noexcept {
  if (!txn_open_ || txn != txn_) {
    // Remaining commands of a refused txn are expected; anything else is a mismatch.
    if (!(doomed_ && txn == txn_)) abort_open(AbortReason::kTxnMismatch, txn, 0);
    return;
  }
  uint32_t idx = op_index_++;
  if (st == TableStatus::kOk) return;
  if (st == TableStatus::kTableFull) {
    TableFullMsg f;
    f.txn = txn;
    f.capacity = table_.capacity();
    f.live_entries = table_.staged_digest().count;
    f.key = key;
    emit(f);
    ++stats_.table_full;
    abort_open(AbortReason::kTableFull, txn, idx);
    return;
  }
  abort_open(AbortReason::kBadEntry, txn, idx);
}

void RnicChannel::on_commit(const CommitMsg& m, bool sync_end) noexcept {
  if (!txn_open_ || m.txn != txn_ || sync_end != txn_is_sync_) {
    if (!(doomed_ && m.txn == txn_)) abort_open(AbortReason::kTxnMismatch, m.txn, op_index_);
    doomed_ = false;
    return;
  }
  // BEGIN promised base + 1; a replay may jump to any newer version.
  bool version_ok = sync_end ? m.version > table_.version() : m.version == table_.version() + 1;
  if (!version_ok || m.version > Level2Table::kMaxVersion) {
    abort_open(AbortReason::kVersionMismatch, m.txn, op_index_);
    doomed_ = false;
    return;
  }
  if (has_digest_reconcile(version_) &&
      (table_.staged_digest().value != m.digest || table_.staged_digest().count != m.entry_count)) {
    abort_open(AbortReason::kDigestMismatch, m.txn, op_index_);
    doomed_ = false;
    return;
  }
  if (table_.commit(m.version) != TableStatus::kOk) {  // unreachable after the checks above
    abort_open(AbortReason::kVersionMismatch, m.txn, op_index_);
    doomed_ = false;
    return;
  }
  vnics_.commit(table_.version());
  txn_open_ = false;
  ++stats_.commits;
  if (state_ == RnicChannelState::kSync) state_ = RnicChannelState::kActive;
  CommittedMsg c;
  c.txn = m.txn;
  c.version = table_.version();
  c.digest = table_.digest().value;
  c.entry_count = table_.digest().count;
  emit(c);
}

void RnicChannel::punt(uint32_t slot, uint32_t generation, uint16_t length, uint16_t port,
                       const EntryKey& missed) noexcept {
  PuntMsg p;
  p.slot = slot;
  p.generation = generation;
  p.length = length;
  p.port = port;
  p.missed = missed;
  emit(p);
}

void RnicChannel::tick(uint64_t now) noexcept {
  ++heartbeat_;
  table_.reclaim(config_.readers ? config_.readers->min_active(table_) : table_.begin_read().epoch);
  if (!agent_seen_ || state_ == RnicChannelState::kHeadless) return;
  if (state_ == RnicChannelState::kAwaitHello) return;
  if (now - last_agent_ns_ > config_.agent_timeout_ns) {
    // Agent gone: keep forwarding on what is committed, drop what is half-staged.
    if (txn_open_) {
      table_.abort();
      vnics_.abort();
    }
    txn_open_ = false;
    doomed_ = false;
    state_ = RnicChannelState::kHeadless;
    version_ = 0;
    ++stats_.headless_entries;
  }
}

void RnicChannel::publish(Bar& bar, const common::CommittedTable* shown) const noexcept {
  // Called every loop iteration while the agent polls the same lines: a store
  // of an unchanged value would still take each line away from the agent's
  // core (and the agent's next read back), so only changes are stored. The
  // comparison is against the BAR itself, so a BAR rewritten by anyone else
  // is corrected on the next call.
  auto put = [](BarLine& l, uint64_t v) {
    if (l.value.load(std::memory_order_relaxed) != v) l.value.store(v, std::memory_order_relaxed);
  };
  put(bar.state, static_cast<uint64_t>(state_));
  bar.heartbeat.value.store(heartbeat_, std::memory_order_relaxed);
  put(bar.rnic_instance, config_.rnic_instance);
  put(bar.negotiated_version, version_);
  bar_publish_table(bar, shown ? *shown : CommittedTable{table_.version(), table_.digest().value, table_.digest().count});
  auto set = [&](BarCounter c, uint64_t v) { put(bar.counters[static_cast<std::size_t>(c)], v); };
  set(BarCounter::kCommits, stats_.commits);
  set(BarCounter::kAborts, stats_.aborts);
  set(BarCounter::kTableFull, stats_.table_full);
}

}  // namespace tandem::rnic
