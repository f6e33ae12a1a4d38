// libFuzzer target: the RNIC end of the DPU channel (rnic/table RnicChannel
// and its level-2 table) fed arbitrary commands, as a buggy or hostile agent
// could write them into the shared rings. Nothing may crash (ASan/UBSan), and
// after every command the committed table must be whole: the digest and count
// the BAR publishes equal those of the entries a reader finds, and never more
// entries than the capacity. A half-applied transaction would break that.
//
// Input: byte 0 picks the protocol version the HELLO offers (v1 commits
// without a digest check, so commits are reachable); then 65-byte records:
// a control byte (bit 0: stamp the expected sequence number, bit 1: advance
// the clock 1 ms and tick, bits 2-7: the command type, mod 10) and 64 bytes
// of message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/channel/layout.h"
#include "common/channel/messages.h"
#include "rnic/table/level2_table.h"
#include "rnic/table/rnic_channel.h"

using namespace tandem::common;
using tandem::rnic::Level2Table;
using tandem::rnic::Level2TableConfig;
using tandem::rnic::RnicChannel;
using tandem::rnic::RnicChannelConfig;

namespace {

void remember(std::vector<EntryKey>& keys, const EntryKey& k) {
  for (const EntryKey& s : keys)
    if (s == k) return;
  if (keys.size() < 512) keys.push_back(k);
}

void check_whole(const Level2Table& table, const RnicChannel& ch, const std::vector<EntryKey>& keys) {
  static Bar bar;  // large and aligned: not on the stack
  ch.publish(bar);
  const auto t = bar_read_table(bar);
  if (!t) std::abort();  // single writer: the seqlock is even after publish
  TableDigest d;
  const Level2Table::Snapshot snap = table.begin_read();
  for (const EntryKey& k : keys)
    if (const Level2Entry* e = table.lookup(snap, k)) d.add(*e);
  if (d.value != t->digest || d.count != t->entry_count || d.count != table.size()) std::abort();
  if (table.size() > table.capacity()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  Level2Table table(Level2TableConfig{16});
  RnicChannelConfig cfg;
  cfg.agent_timeout_ns = 5'000'000;
  RnicChannel ch(table, cfg);
  uint64_t now = 1'000'000;
  uint32_t seq = 0;
  std::vector<EntryKey> keys;

  HelloMsg hello;
  hello.hdr.seq = ++seq;
  hello.oldest_version = 1;
  hello.current_version = static_cast<uint16_t>(1 + data[0] % kProtocolVersionCurrent);
  hello.agent_instance = 7;
  ch.on_command(to_raw(hello), now);

  RawMessage out;
  for (std::size_t off = 1; off + 1 + kMessageSize <= size; off += 1 + kMessageSize) {
    const uint8_t ctl = data[off];
    RawMessage m;
    std::memcpy(&m, data + off + 1, kMessageSize);
    MessageHeader h;
    std::memcpy(&h, &m, sizeof h);
    h.type = static_cast<MessageType>(1 + (ctl >> 2) % 10);
    if (ctl & 1) h.seq = seq + 1;
    seq = h.seq;
    std::memcpy(&m, &h, sizeof h);
    if (h.type == MessageType::kPut) {
      PutMsg p;
      std::memcpy(&p, &m, sizeof p);
      remember(keys, p.entry.key);
    }
    if (ctl & 2) {
      now += 1'000'000;
      ch.tick(now);
    }
    ch.on_command(m, now);
    while (ch.pop_event(out)) {
    }
    check_whole(table, ch, keys);
  }
  ch.tick(now + 10'000'000);  // past the agent timeout: headless keeps the table
  while (ch.pop_event(out)) {
  }
  check_whole(table, ch, keys);
  return 0;
}
