#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "rnic/table/rnic_channel.h"

using namespace tandem::rnic;
using namespace tandem::common;

namespace {

struct Rnic {
  Level2Table table{Level2TableConfig{32}};
  RnicChannel ch{table, RnicChannelConfig{}};
  uint32_t seq = 0;
  uint64_t now = 0;

  template <class M>
  void send(M m) {
    m.hdr.seq = seq++;
    ch.on_command(to_raw(m), now += 1000);
  }
  std::vector<RawMessage> events() {
    std::vector<RawMessage> out;
    RawMessage m;
    while (ch.pop_event(m)) out.push_back(m);
    return out;
  }
  void hello() {
    HelloMsg h;
    h.agent_instance = 5;
    send(h);
    events();
  }
  // BEGIN txn and PUT e in it; the caller commits (or not).
  void begin_put(uint32_t txn, const Level2Entry& e) {
    BeginMsg b;
    b.txn = txn;
    b.base_version = table.version();
    send(b);
    PutMsg p;
    p.txn = txn;
    p.entry = e;
    send(p);
  }
};

Level2Entry entry(uint32_t ip, uint32_t dst) {
  EgressAction a;
  a.underlay_dst_ip = dst;
  return make_egress_entry(egress_key(1, ip), a);
}

}  // namespace

TEST_CASE("commands before HELLO are answered with not-negotiated errors") {
  Rnic r;
  BeginMsg b;
  b.txn = 1;
  r.send(b);
  auto ev = r.events();
  REQUIRE(ev.size() == 1);
  REQUIRE(ev[0].type() == MessageType::kError);
  CHECK(as<ErrorMsg>(ev[0]).code == ChannelError::kNotNegotiated);
  CHECK(r.table.version() == 0);
}

TEST_CASE("HELLO_ACK reports the chosen version and the committed table") {
  Rnic r;
  HelloMsg h;
  h.agent_instance = 77;
  h.oldest_version = 1;
  h.current_version = 9;
  r.send(h);
  auto ev = r.events();
  REQUIRE(ev.size() == 1);
  auto ack = as<HelloAckMsg>(ev[0]);
  CHECK(ack.chosen_version == kProtocolVersionCurrent);
  CHECK(ack.agent_instance == 77);
  CHECK(ack.table_capacity == 32);
  CHECK(ack.committed_version == 0);
  CHECK(r.ch.state() == RnicChannelState::kSync);
}

TEST_CASE("a COMMIT whose digest differs from the staged table is aborted") {
  Rnic r;
  r.hello();
  r.begin_put(1, entry(1, 1));
  CommitMsg c;
  c.txn = 1;
  c.version = 1;
  c.digest = 12345;  // not what was staged
  c.entry_count = 1;
  r.send(c);
  auto ev = r.events();
  REQUIRE(ev.size() == 1);
  REQUIRE(ev[0].type() == MessageType::kAborted);
  CHECK(as<AbortedMsg>(ev[0]).reason == AbortReason::kDigestMismatch);
  CHECK(r.table.size() == 0);
}

TEST_CASE("a BEGIN on a stale base version is refused and its ops ignored") {
  Rnic r;
  r.hello();
  BeginMsg b;
  b.txn = 4;
  b.base_version = 3;
  r.send(b);
  PutMsg p;
  p.txn = 4;
  p.entry = entry(1, 1);
  r.send(p);
  CommitMsg c;
  c.txn = 4;
  c.version = 4;
  r.send(c);
  auto ev = r.events();
  REQUIRE(ev.size() == 1);  // one ABORTED, the rest of the txn silently dropped
  CHECK(as<AbortedMsg>(ev[0]).reason == AbortReason::kVersionMismatch);
  CHECK(r.table.size() == 0);
}

namespace {
// Random commands, mostly coherent, some garbage (the fuzz below).
RawMessage random_command(std::mt19937& rng, Rnic& r, uint32_t& last_txn) {
  RawMessage m;
  for (auto& b : m.bytes) b = static_cast<uint8_t>(rng());
  static const MessageType kTypes[] = {MessageType::kBegin,  MessageType::kPut,       MessageType::kDel,
                                       MessageType::kCommit, MessageType::kAbort,     MessageType::kSyncStart,
                                       MessageType::kSyncEnd, MessageType::kHeartbeat, MessageType::kHello,
                                       static_cast<MessageType>(0x77)};
  m.bytes[0] = static_cast<uint8_t>(kTypes[rng() % 10]);
  auto put32 = [&](std::size_t off, uint32_t v) { std::memcpy(m.bytes + off, &v, 4); };
  auto put64 = [&](std::size_t off, uint64_t v) { std::memcpy(m.bytes + off, &v, 8); };
  bool coherent = rng() % 4 != 0;
  MessageType t = m.type();
  if (t == MessageType::kHello) {
    if (coherent) {
      uint16_t v[2] = {kProtocolVersionOldest, kProtocolVersionCurrent};
      std::memcpy(m.bytes + 8, v, 4);
    }
  } else if (t == MessageType::kBegin || t == MessageType::kSyncStart) {
    if (coherent) {
      last_txn = static_cast<uint32_t>(rng());
      put32(8, last_txn);
      put64(16, r.table.version());
    }
  } else if (t == MessageType::kPut || t == MessageType::kDel) {
    if (coherent) put32(8, last_txn);
    m.bytes[16] = rng() % 8 ? 1 : static_cast<uint8_t>(rng());
    m.bytes[17] = m.bytes[18] = m.bytes[19] = 0;
    std::memset(m.bytes + 20, 0, 4);
    m.bytes[24] = static_cast<uint8_t>(rng() % 40);
    std::memset(m.bytes + 25, 0, 3);
  } else if (t == MessageType::kCommit || t == MessageType::kSyncEnd || t == MessageType::kAbort) {
    if (coherent) {
      put32(8, last_txn);
      put32(12, r.table.staged_digest().count);
      put64(16, r.table.version() + 1 + (t == MessageType::kSyncEnd ? rng() % 3 : 0));
      put64(24, r.table.staged_digest().value);
    }
  }
  if (rng() % 4) m.set_seq(r.seq);
  r.seq = m.seq() + 1;
  return m;
}
}  // namespace

TEST_CASE("a burst through on_commands gives the same table and events as one command at a time") {
  Rnic one, burst;
  one.hello();
  burst.hello();
  std::mt19937 rng(23);
  uint32_t last_txn = 0;
  for (int round = 0; round < 400; ++round) {
    // Commands are generated against `one` (its table decides coherent fields).
    std::vector<RawMessage> cmds;
    for (int i = 0, n = 1 + rng() % 64; i < n; ++i) {
      cmds.push_back(random_command(rng, one, last_txn));
      one.ch.on_command(cmds.back(), one.now += 1000);
    }
    burst.ch.on_commands(cmds.data(), cmds.size(), burst.now += 1000 * cmds.size());
    auto a = one.events(), b = burst.events();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(std::memcmp(a[i].bytes, b[i].bytes, kMessageSize) == 0);
    REQUIRE(one.table.version() == burst.table.version());
    REQUIRE(one.table.digest() == burst.table.digest());
    REQUIRE(one.table.staged_digest() == burst.table.staged_digest());
  }
  CHECK(one.ch.stats().commits > 0);
}

TEST_CASE("random and malformed commands never corrupt the committed table") {
  Rnic r;
  r.hello();
  std::mt19937 rng(11);
  TableDigest model;  // what COMMITTED events claim
  uint32_t last_txn = 0;
  for (int i = 0; i < 20000; ++i) {
    const RawMessage m = random_command(rng, r, last_txn);
    r.ch.on_command(m, r.now += 1000);
    r.ch.tick(r.now);
    for (const RawMessage& e : r.events())
      if (e.type() == MessageType::kCommitted) {
        auto c = as<CommittedMsg>(e);
        CHECK(c.version == r.table.version());
        model.value = c.digest;
        model.count = c.entry_count;
      }
  }
  // The committed table is exactly what its digest says, within capacity.
  TableDigest recomputed;
  r.table.for_each_committed([&](const Level2Entry& e) { recomputed.add(e); });
  CHECK(recomputed == r.table.digest());
  CHECK(model == r.table.digest());  // the last COMMITTED told the truth
  CHECK(r.table.size() <= r.table.capacity());
  CHECK(r.ch.stats().commits > 0);
}

namespace {
Level2Entry vnic_entry(uint32_t id, uint32_t ip) {
  VnicAction a;
  a.vnic_id = id;
  a.overlay_ip = ip;
  a.vni = 100;
  return make_vnic_entry(a);
}
}  // namespace

TEST_CASE("vNIC entries become the RNIC's vNIC list only when their transaction commits") {
  Rnic r;
  r.hello();
  REQUIRE(r.ch.vnics_from_agent());
  BeginMsg b;
  b.txn = 1;
  r.send(b);
  PutMsg p;
  p.txn = 1;
  p.entry = vnic_entry(1, 0xC0A80001);
  r.send(p);
  p.entry = vnic_entry(2, 0xC0A80002);
  r.send(p);
  CHECK(r.ch.vnics().committed().empty());  // staged: invisible
  CommitMsg c;
  c.txn = 1;
  c.version = 1;
  c.digest = r.table.staged_digest().value;
  c.entry_count = 2;
  r.send(c);
  REQUIRE(r.events().at(0).type() == MessageType::kCommitted);
  REQUIRE(r.ch.vnics().committed().size() == 2);
  CHECK(r.ch.vnics().version() == 1);
  // A txn that deletes one and is aborted changes nothing.
  b.txn = 2;
  b.base_version = 1;
  r.send(b);
  DelMsg d;
  d.txn = 2;
  d.key = vnic_key(1);
  r.send(d);
  AbortMsg a;
  a.txn = 2;
  r.send(a);
  r.events();
  CHECK(r.ch.vnics().committed().size() == 2);
  // A full replay replaces the list with exactly what it sends.
  SyncStartMsg ss;
  ss.txn = 3;
  r.send(ss);
  p.txn = 3;
  p.entry = vnic_entry(7, 0xC0A80007);
  r.send(p);
  CommitMsg se;
  se.hdr.type = MessageType::kSyncEnd;
  se.txn = 3;
  se.version = 5;
  se.digest = r.table.staged_digest().value;
  se.entry_count = 1;
  r.send(se);
  REQUIRE(r.events().at(0).type() == MessageType::kCommitted);
  REQUIRE(r.ch.vnics().committed().size() == 1);
  CHECK(r.ch.vnics().find(7) != nullptr);
  CHECK(r.ch.vnics().version() == 5);
}

TEST_CASE("a vNIC entry whose key and action name different vNICs is a bad entry") {
  Level2Table t(Level2TableConfig{8});
  REQUIRE(t.begin() == TableStatus::kOk);
  Level2Entry e = vnic_entry(1, 0xC0A80001);
  e.vnic.vnic_id = 2;
  CHECK(t.put(e) == TableStatus::kBadEntry);
  e = vnic_entry(1, 0xC0A80001);
  e.key.word1 = 3;
  CHECK(t.put(e) == TableStatus::kBadEntry);
  CHECK(t.put(vnic_entry(1, 0xC0A80001)) == TableStatus::kOk);
}

TEST_CASE("a vNIC entry's partition key must be a real full-member key, and travels only from v4") {
  Level2Table t(Level2TableConfig{8});
  REQUIRE(t.begin() == TableStatus::kOk);
  Level2Entry e = vnic_entry(1, 0xC0A80001);
  for (uint16_t bad : {0x0005, 0x8000, 0xFFFF}) {
    e.vnic.pkey = bad;
    CHECK(t.put(e) == TableStatus::kBadEntry);
  }
  e.vnic.pkey = 0x8005;
  CHECK(t.put(e) == TableStatus::kOk);

  // An agent that negotiated v3 sends no keys: a v3 channel refuses one.
  Rnic r;
  HelloMsg h;
  h.agent_instance = 5;
  h.current_version = kProtocolVersionVnic;
  r.send(h);
  REQUIRE(r.ch.negotiated_version() == kProtocolVersionVnic);
  r.events();
  r.begin_put(1, e);
  const auto ev = r.events();
  REQUIRE(!ev.empty());
  CHECK(ev.back().type() == MessageType::kAborted);
  CHECK(r.ch.stats().vnic_entries_refused == 1);
}

// Regression (fuzz finding 6cfec604): a SYNC_END to version 2^64-1 committed, and at that version
// every entry's remove_version (kNever, "not removed") is not above it, so the table counted two
// entries that no lookup found. It is now refused and the committed table stays readable.
TEST_CASE("a commit to the last 64-bit version is refused and the table stays readable") {
  Rnic r;
  r.hello();
  r.begin_put(1, entry(1, 1));
  CommitMsg c;
  c.txn = 1;
  c.version = 1;
  c.digest = r.table.staged_digest().value;
  c.entry_count = 1;
  r.send(c);
  REQUIRE(r.events().at(0).type() == MessageType::kCommitted);

  SyncStartMsg ss;
  ss.txn = 2;
  r.send(ss);
  PutMsg p;
  p.txn = 2;
  p.entry = entry(2, 2);
  r.send(p);
  CommitMsg se;
  se.hdr.type = MessageType::kSyncEnd;
  se.txn = 2;
  se.version = ~uint64_t{0};
  se.digest = r.table.staged_digest().value;
  se.entry_count = 1;
  r.send(se);
  auto ev = r.events();
  REQUIRE(ev.size() == 1);
  REQUIRE(ev[0].type() == MessageType::kAborted);
  CHECK(as<AbortedMsg>(ev[0]).reason == AbortReason::kVersionMismatch);
  CHECK(r.table.version() == 1);
  const auto snap = r.table.begin_read();
  CHECK(r.table.lookup(snap, egress_key(1, 1)) != nullptr);
  CHECK(r.table.lookup(snap, egress_key(1, 2)) == nullptr);
  CHECK(r.table.size() == 1);
}
