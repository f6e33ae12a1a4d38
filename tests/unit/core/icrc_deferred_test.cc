// A request whose ICRC is checked while its payload is placed
// (RxPacketRef::icrc_pending: the RX stage computed only its headers' part)
// and turns out bad leaves no trace but bytes that the packet at its place
// overwrites when it comes (rnic/core/README.md "ICRC"). Two receivers are fed
// the same recorded request stream (loss, duplicates, retransmissions; IRN's
// reordered), one with corrupted copies of SEND/WRITE frames slipped in ahead
// of their good copies (a payload byte, an XETH or RETH byte, the PSN, the
// ICRC) and every SEND/WRITE's ICRC pending, the other without the bad copies
// (as if the NIC had dropped them): same verdicts for the good frames, the bad
// ones kBadIcrc, the same ACK/NAK/SACK frames after every burst, the same
// completions, the same memory at the end. And a READ of this QP never sends
// a bad packet's bytes.
#include <catch2/catch.hpp>

#include <algorithm>

#include "common/wire/byte_order.h"
#include "common/wire/icrc.h"
#include "common/wire/opcode.h"
#include "tests/unit/core/loop.h"
#include "tests/unit/core/replay_rx.h"

using namespace tandem;
using namespace tandem::rnic;
using namespace tandem::rnic::test;

namespace {

constexpr std::size_t kMem = 512 * 1024;
constexpr uint32_t kSlot = 4096;
constexpr uint32_t kMsgs = 40;

using Rx = ReplayRx<kMem>;

// A frame as the RX stage hands it over: parsed headers, and for a SEND or
// WRITE request the CRC of the ICRC's stream up to the payload.
struct Frame {
  std::vector<uint8_t> bytes;
  common::RocePacket pkt;
  bool bad = false;
  bool pending = false;
  uint32_t head = 0;
  RxPacketRef ref() const {
    return RxPacketRef{&pkt, bytes.data() + pkt.payload_offset, pkt.payload_len, pending, head};
  }
};

bool make_frame(std::vector<uint8_t> bytes, Frame& f) {
  static constexpr common::ParseOptions kHeadersOnly{.check_icrc = false, .check_ip_checksum = true};
  f.bytes = std::move(bytes);
  if (common::parse_roce(f.bytes.data(), f.bytes.size(), f.pkt, kHeadersOnly) != common::DropReason::kNone)
    return false;
  f.pending = common::opcode_has(f.pkt.bth.opcode, common::kOpSend | common::kOpWrite);
  f.head = common::icrc_headers(f.bytes.data() + f.pkt.ip_offset, f.pkt.payload_offset - f.pkt.ip_offset);
  return true;
}

std::vector<uint8_t> frame_bytes(const TxDesc& d) {
  uint8_t buf[9100];
  FrameAddrs fa;
  fa.src_ip = 2;
  fa.dst_ip = 1;
  const std::size_t n = build_frame(d, fa, buf, sizeof buf);
  return {buf, buf + n};
}

std::vector<std::vector<uint8_t>> responses(Rx& r, uint64_t now) {
  std::vector<std::vector<uint8_t>> out;
  r.t.poll(now);
  while (!r.t.tx().empty()) {
    out.push_back(frame_bytes(r.t.tx().front()));
    r.t.tx().pop();
  }
  return out;
}

std::vector<Completion> completions(Rx& r) {
  std::vector<Completion> out;
  Completion c[64];
  while (uint32_t n = r.t.poll_cq(r.cq, c, 64)) out.insert(out.end(), c, c + n);
  return out;
}

struct CaseResult {
  uint64_t dropped_by_core = 0;  // bad copies the core found (while placing, or checking first)
  uint64_t bursts_ahead = 0;     // bursts after which a bad copy's bytes sat in memory
};

CaseResult run_case(Reliability mode, uint64_t seed) {
  QpSetup s;
  s.mode = mode;
  s.mtu = 1024;
  NetConfig net;
  net.loss = 0.03;
  net.duplicate = 0.03;
  net.jitter_ns = mode == Reliability::kIrn ? 10'000 : 0;
  Loop gen(kMem, s, net, seed);
  REQUIRE(gen.ok);
  gen.record = true;
  std::mt19937_64 rng(seed);
  const ibv_wr_opcode ops[] = {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM};
  std::vector<RecvWr> recvs;
  for (uint32_t i = 0; i < kMsgs; ++i) {
    const ibv_wr_opcode op = ops[rng() % 4];
    const uint32_t len = rng() % 4 == 0 ? static_cast<uint32_t>(rng() % 300) : static_cast<uint32_t>(rng() % kSlot);
    fill_pattern(gen.a.mem, i * kSlot, len, i);
    if (op != IBV_WR_RDMA_WRITE) {
      recvs.push_back(make_recv(i, gen.b, kMem / 2 + i * kSlot, kSlot));
      REQUIRE(gen.recv(gen.b, recvs.back()) == 0);
    }
    REQUIRE(gen.send(gen.a, make_wr(op, i, gen.a, i * kSlot, len, &gen.b, kMem / 2 + i * kSlot, i)) == 0);
  }
  gen.settle();
  REQUIRE(gen.b.done.size() == recvs.size());

  // The stream, with corrupted copies of a quarter of the SEND/WRITE frames
  // a few frames ahead of the good ones.
  std::vector<Frame> stream;
  uint64_t bad_copies = 0;
  for (const auto& bytes : gen.sent_by_a) {
    Frame good;
    REQUIRE(make_frame(bytes, good));
    if (good.pending && rng() % 4 == 0) {
      std::vector<uint8_t> b = bytes;
      const std::size_t pay = good.pkt.payload_offset, bth = good.pkt.ip_offset + 28;
      switch (rng() % (mode == Reliability::kIrn ? 5 : 4)) {
        case 0:  // a payload byte
          if (good.pkt.payload_len != 0) b[pay + rng() % good.pkt.payload_len] ^= 0x10;
          else b[b.size() - 1] ^= 1;
          break;
        case 1:  // where it goes: the XETH (IRN) or the RETH's address (go-back-N)
          if (mode == Reliability::kIrn) b[pay + rng() % 24] ^= 0x01;
          else if (common::opcode_has(good.pkt.bth.opcode, common::kOpReth)) b[bth + 12 + rng() % 8] ^= 0x01;
          else b[pay + rng() % std::max<uint32_t>(1, good.pkt.payload_len)] ^= 0x80;
          break;
        case 2:  // the PSN
          b[bth + 11] ^= static_cast<uint8_t>(1 + rng() % 3);
          break;
        case 3:  // the ICRC itself
          b[b.size() - 1 - rng() % 4] ^= 0x04;
          break;
        default: {  // IRN: the PSN and the XETH's offset moved together, onto the next packet's place
          b[bth + 11] = static_cast<uint8_t>(b[bth + 11] + 1);
          common::store_be32(b.data() + pay + 4, common::load_be32(b.data() + pay + 4) + s.mtu);
        }
      }
      Frame f;
      if (make_frame(std::move(b), f) && f.pending) {
        f.bad = true;
        const std::size_t back = std::min<std::size_t>(stream.size(), rng() % 5);
        stream.insert(stream.end() - static_cast<std::ptrdiff_t>(back), std::move(f));
        ++bad_copies;
      }
    }
    stream.push_back(std::move(good));
  }
  // (Go-back-N would refuse everything after a swap.)
  if (mode == Reliability::kIrn)
    for (std::size_t i = 0; i + 1 < stream.size(); i += 2 + rng() % 5) std::swap(stream[i], stream[i + 1]);
  REQUIRE(bad_copies > 10);

  Rx ref, fused;
  make_rx(ref, gen.b, s, gen.a.qpn);
  make_rx(fused, gen.b, s, gen.a.qpn);
  for (const RecvWr& w : recvs) {
    REQUIRE(ref.t.post_recv(ref.qpn, w) == 0);
    REQUIRE(fused.t.post_recv(fused.qpn, w) == 0);
  }
  uint64_t now = 1'000'000;
  std::vector<RxPacketRef> in_ref, in_fused;
  std::vector<common::DropReason> why_ref(32), why_fused(32);
  uint64_t bad_seen = 0, bursts_ahead = 0;
  for (std::size_t at = 0; at < stream.size();) {
    std::size_t n = std::min<std::size_t>(stream.size() - at, 1 + rng() % 32);
    // Most bursts with a bad copy end with it: its bytes, if placed, are
    // still there when the burst's responses and completions are compared.
    if (rng() % 8 != 0)
      for (std::size_t i = at; i < at + n; ++i)
        if (stream[i].bad) {
          n = i + 1 - at;
          break;
        }
    in_ref.clear();
    in_fused.clear();
    for (std::size_t i = at; i < at + n; ++i) {
      in_fused.push_back(stream[i].ref());
      if (!stream[i].bad) {
        in_ref.push_back(stream[i].ref());
        in_ref.back().icrc_pending = false;  // checked by the I/O layer
      }
    }
    fused.t.on_packets(in_fused.data(), static_cast<uint32_t>(in_fused.size()), now, why_fused.data());
    ref.t.on_packets(in_ref.data(), static_cast<uint32_t>(in_ref.size()), now, why_ref.data());
    for (std::size_t i = 0, j = 0; i < n; ++i) {
      const Frame& f = stream[at + i];
      INFO("frame " << at + i << " opcode " << int(f.pkt.bth.opcode) << " psn " << f.pkt.bth.psn << " bad " << f.bad);
      if (f.bad) {
        ++bad_seen;
        REQUIRE(why_fused[i] == common::DropReason::kBadIcrc);
      } else {
        REQUIRE(why_fused[i] == why_ref[j++]);
      }
    }
    // Nothing of a bad copy is acknowledged or completed: the same responses
    // and completions, burst by burst.
    REQUIRE(responses(fused, now) == responses(ref, now));
    const std::vector<Completion> c1 = completions(ref), c2 = completions(fused);
    REQUIRE(c1.size() == c2.size());
    for (std::size_t i = 0; i < c1.size(); ++i) {
      REQUIRE(c1[i].wr_id == c2[i].wr_id);
      REQUIRE(c1[i].status == c2[i].status);
      REQUIRE(c1[i].opcode == c2[i].opcode);
      REQUIRE(c1[i].byte_len == c2[i].byte_len);
      REQUIRE(c1[i].imm_data == c2[i].imm_data);
      // What a completion exposes (a SEND's receive, a WRITE_IMM's range,
      // both message i's slot) holds the good bytes.
      const std::size_t slot = kMem / 2 + c2[i].wr_id * kSlot;
      REQUIRE(std::equal(fused.mem.begin() + slot, fused.mem.begin() + slot + c2[i].byte_len,
                         gen.b.mem.begin() + slot));
    }
    // A bad copy's bytes may sit where its good packet is still to come.
    bursts_ahead += fused.mem != ref.mem;
    at += n;
    now += 3'000;
  }
  REQUIRE(bad_seen == bad_copies);
  const QpCounters& q1 = *ref.t.qp_counters(ref.qpn);
  const QpCounters& q2 = *fused.t.qp_counters(fused.qpn);
  REQUIRE(q1.rx_pkts == q2.rx_pkts);
  REQUIRE(q1.rx_bytes == q2.rx_bytes);
  REQUIRE(q1.acks_tx == q2.acks_tx);
  REQUIRE(q1.naks_tx == q2.naks_tx);
  REQUIRE(q1.reorder_depth_max == q2.reorder_depth_max);
  // The bad copies' bytes, where any were placed, were overwritten: the same
  // memory (and every receive done, every WRITE's bytes as sent).
  REQUIRE(fused.mem == ref.mem);
  REQUIRE(std::equal(fused.mem.begin() + kMem / 2, fused.mem.end(), gen.b.mem.begin() + kMem / 2));
  return {q2.drops[static_cast<std::size_t>(common::DropReason::kBadIcrc)], bursts_ahead};
}

}  // namespace

TEST_CASE("a bad ICRC found while placing leaves nothing but overwritten bytes, go-back-N", "[core][icrc]") {
  CaseResult sum;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const CaseResult r = run_case(Reliability::kGoBackN, seed);
    sum.dropped_by_core += r.dropped_by_core;
    sum.bursts_ahead += r.bursts_ahead;
  }
  CHECK(sum.dropped_by_core > 0);
  CHECK(sum.bursts_ahead > 0);  // the fused path was taken
}

TEST_CASE("a bad ICRC found while placing leaves nothing but overwritten bytes, IRN", "[core][icrc]") {
  // IRN places a packet ahead of its ICRC once a verified packet of its
  // message has told where the message goes (PlacedAhead).
  CaseResult sum;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const CaseResult r = run_case(Reliability::kIrn, seed);
    sum.dropped_by_core += r.dropped_by_core;
    sum.bursts_ahead += r.bursts_ahead;
  }
  CHECK(sum.dropped_by_core > 0);
  CHECK(sum.bursts_ahead > 0);  // the fused path was taken
}

TEST_CASE("a READ never sends the bytes of a packet placed ahead of its bad ICRC", "[core][icrc]") {
  // Go-back-N: a READ of a range, then a 3-packet WRITE to it. A corrupted
  // middle packet is placed (the WRITE's first packet named the place) and
  // dropped; the READ's retry is not executed until the good middle packet
  // has overwritten the bytes; a READ still queued when a packet comes means
  // it is checked before it is placed.
  QpSetup s;
  s.mode = Reliability::kGoBackN;
  s.mtu = 1024;
  Loop gen(kMem, s);
  REQUIRE(gen.ok);
  gen.record = true;
  constexpr uint32_t kLen = 3 * 1024;
  fill_pattern(gen.b.mem, 0, kLen, 7);      // what the READ reads (the old bytes)
  fill_pattern(gen.a.mem, 8192, kLen, 8);   // what the WRITE writes
  REQUIRE(gen.send(gen.a, make_wr(IBV_WR_RDMA_READ, 1, gen.a, 65536, kLen, &gen.b, 0)) == 0);
  REQUIRE(gen.send(gen.a, make_wr(IBV_WR_RDMA_WRITE, 2, gen.a, 8192, kLen, &gen.b, 0)) == 0);
  gen.settle();
  // The READ request and the WRITE's first, middle and last packets, as first sent.
  std::vector<Frame> f(4);
  std::vector<std::vector<uint8_t>> sent(4);
  std::vector<bool> have(4);
  for (const auto& bytes : gen.sent_by_a) {
    Frame x;
    REQUIRE(make_frame(bytes, x));
    const uint8_t op = x.pkt.bth.opcode;
    const int k = op == IBV_OPCODE_RC_RDMA_READ_REQUEST ? 0
                  : op == IBV_OPCODE_RC_RDMA_WRITE_FIRST ? 1
                  : op == IBV_OPCODE_RC_RDMA_WRITE_MIDDLE ? 2
                  : op == IBV_OPCODE_RC_RDMA_WRITE_LAST ? 3 : -1;
    if (k < 0 || have[k]) continue;
    have[k] = true;
    f[k] = std::move(x);
    sent[k] = bytes;
  }
  REQUIRE(std::count(have.begin(), have.end(), true) == 4);

  Rx r;
  make_rx(r, gen.b, s, gen.a.qpn);
  fill_pattern(r.mem, 0, kLen, 7);
  Frame bad;
  std::vector<uint8_t> b = sent[2];
  b[f[2].pkt.payload_offset + 100] ^= 0xFF;
  REQUIRE(make_frame(b, bad));
  const std::vector<uint8_t> old(r.mem.begin(), r.mem.begin() + kLen);

  uint64_t now = 1'000'000;
  auto feed = [&](const Frame& fr) {
    const RxPacketRef in = fr.ref();
    common::DropReason why;
    r.t.on_packets(&in, 1, now, &why);
    now += 1000;
    return why;
  };
  auto read_payloads = [&] {
    std::vector<uint8_t> got;
    for (const auto& bytes : responses(r, now)) {
      common::RocePacket p;
      REQUIRE(common::parse_roce(bytes.data(), bytes.size(), p) == common::DropReason::kNone);
      if (common::opcode_has(p.bth.opcode, common::kOpReadResp))
        got.insert(got.end(), bytes.begin() + p.payload_offset, bytes.begin() + p.payload_offset + p.payload_len);
    }
    return got;
  };
  const uint64_t bad_before = r.t.qp_counters(r.qpn)->drops[static_cast<std::size_t>(common::DropReason::kBadIcrc)];
  // The READ queued, not yet answered: the bad middle packet is checked before it is placed.
  REQUIRE(feed(f[0]) == common::DropReason::kNone);
  REQUIRE(feed(f[1]) == common::DropReason::kNone);
  REQUIRE(feed(bad) == common::DropReason::kBadIcrc);
  REQUIRE(std::equal(old.begin() + 1024, old.begin() + 2048, r.mem.begin() + 1024));
  // (The READ's responses read the first packet's new bytes: a WRITE after an unfenced READ.)
  REQUIRE(read_payloads().size() == kLen);
  // Nothing queued now: the bad middle packet is placed, then dropped.
  REQUIRE(feed(bad) == common::DropReason::kBadIcrc);
  REQUIRE(r.mem[1024 + 100] == static_cast<uint8_t>(gen.a.mem[8192 + 1024 + 100] ^ 0xFF));
  REQUIRE(responses(r, now).empty());  // no ACK covers it
  // The READ's retry waits (the requester asks again) ...
  REQUIRE(feed(f[0]) == common::DropReason::kNoBuffer);
  REQUIRE(read_payloads().empty());
  // ... until the good middle packet has overwritten the bytes.
  REQUIRE(feed(f[2]) == common::DropReason::kNone);
  REQUIRE(feed(f[0]) == common::DropReason::kDuplicate);
  const std::vector<uint8_t> again = read_payloads();
  REQUIRE(again.size() == kLen);
  REQUIRE(std::equal(again.begin() + 1024, again.begin() + 2048, gen.a.mem.begin() + 8192 + 1024));
  REQUIRE(feed(f[3]) == common::DropReason::kNone);
  REQUIRE(std::equal(r.mem.begin(), r.mem.begin() + kLen, gen.a.mem.begin() + 8192));
  CHECK(r.t.qp_counters(r.qpn)->drops[static_cast<std::size_t>(common::DropReason::kBadIcrc)] == bad_before + 2);
}

TEST_CASE("IRN: a packet placed ahead of its bad ICRC is not acknowledged, and no READ reads it before its good packet", "[core][icrc]") {
  // A READ of a range, then a 3-packet WRITE to it. The WRITE's first packet
  // arrives first (verified: the message's place is known), then a corrupted
  // copy of its middle packet: placed (the place its good packet writes) and
  // dropped; no ACK or SACK covers its PSN. The READ, arriving next at ePSN,
  // is held while the bad bytes sit there; the good middle packet overwrites
  // them and the READ then answers with the good bytes.
  QpSetup s;
  s.mode = Reliability::kIrn;
  s.mtu = 1024;
  Loop gen(kMem, s);
  REQUIRE(gen.ok);
  gen.record = true;
  constexpr uint32_t kLen = 3 * 1024;
  fill_pattern(gen.b.mem, 0, kLen, 7);     // what the READ would read before the WRITE
  fill_pattern(gen.a.mem, 8192, kLen, 8);  // what the WRITE writes
  REQUIRE(gen.send(gen.a, make_wr(IBV_WR_RDMA_READ, 1, gen.a, 65536, kLen, &gen.b, 0)) == 0);
  REQUIRE(gen.send(gen.a, make_wr(IBV_WR_RDMA_WRITE, 2, gen.a, 8192, kLen, &gen.b, 0)) == 0);
  gen.settle();
  std::vector<Frame> f(4);
  std::vector<std::vector<uint8_t>> sent(4);
  std::vector<bool> have(4);
  for (const auto& bytes : gen.sent_by_a) {
    Frame x;
    REQUIRE(make_frame(bytes, x));
    const uint8_t op = x.pkt.bth.opcode;
    const int k = op == IBV_OPCODE_RC_RDMA_READ_REQUEST ? 0
                  : op == IBV_OPCODE_RC_RDMA_WRITE_FIRST ? 1
                  : op == IBV_OPCODE_RC_RDMA_WRITE_MIDDLE ? 2
                  : op == IBV_OPCODE_RC_RDMA_WRITE_LAST ? 3 : -1;
    if (k < 0 || have[k]) continue;
    have[k] = true;
    f[k] = std::move(x);
    sent[k] = bytes;
  }
  REQUIRE(std::count(have.begin(), have.end(), true) == 4);
  const uint32_t mid_psn = f[2].pkt.bth.psn;

  Rx r;
  make_rx(r, gen.b, s, gen.a.qpn);
  fill_pattern(r.mem, 0, kLen, 7);
  Frame bad;
  std::vector<uint8_t> b = sent[2];
  b[f[2].pkt.payload_offset + kXethLen + 100] ^= 0xFF;
  REQUIRE(make_frame(b, bad));

  uint64_t now = 1'000'000;
  auto feed = [&](const Frame& fr) {
    const RxPacketRef in = fr.ref();
    common::DropReason why;
    r.t.on_packets(&in, 1, now, &why);
    now += 1000;
    return why;
  };
  // The responses so far: whether an ACK or SACK says `psn` arrived, and the
  // READ responses' payload.
  bool acked = false;
  std::vector<uint8_t> read_bytes;
  auto drain = [&] {
    for (const auto& bytes : responses(r, now)) {
      common::RocePacket p;
      REQUIRE(common::parse_roce(bytes.data(), bytes.size(), p) == common::DropReason::kNone);
      if (common::opcode_has(p.bth.opcode, common::kOpReadResp)) {
        read_bytes.insert(read_bytes.end(), bytes.begin() + p.payload_offset,
                          bytes.begin() + p.payload_offset + p.payload_len);
        continue;
      }
      if (p.bth.opcode == IBV_OPCODE_RC_ACKNOWLEDGE && common::aeth_kind(p.aeth.syndrome) == common::kAethAck)
        acked |= common::psn_le(mid_psn, p.bth.psn);
      if (p.bth.opcode == IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE && (p.bth.resv7 & kSackMark)) {
        acked |= common::psn_le(mid_psn, p.bth.psn);
        const int32_t bit = common::psn_diff(mid_psn, sack_base(p.atomic_ack));
        acked |= bit >= 0 && bit < static_cast<int32_t>(kSackBits) && ((sack_bitmap(p.atomic_ack) >> bit) & 1);
      }
    }
  };
  REQUIRE(feed(f[1]) == common::DropReason::kNone);  // the WRITE's first packet: its place is known
  drain();
  REQUIRE(feed(bad) == common::DropReason::kBadIcrc);
  // Placed, as an RNIC that DMAs ahead of the trailer would have it ...
  REQUIRE(r.mem[1024 + 100] == static_cast<uint8_t>(gen.a.mem[8192 + 1024 + 100] ^ 0xFF));
  // ... but not acknowledged, and not read: the READ at ePSN waits.
  REQUIRE(feed(f[3]) == common::DropReason::kNone);
  REQUIRE(feed(f[0]) == common::DropReason::kNone);
  drain();
  REQUIRE_FALSE(acked);
  REQUIRE(read_bytes.empty());
  REQUIRE(feed(f[0]) == common::DropReason::kDuplicate);  // a retry of the held READ: answered once
  drain();
  REQUIRE(read_bytes.empty());
  // The good middle packet overwrites the bytes; the READ goes on.
  REQUIRE(feed(f[2]) == common::DropReason::kNone);
  REQUIRE(feed(f[3]) == common::DropReason::kDuplicate);  // answered with an ACK at once
  drain();
  REQUIRE(acked);
  REQUIRE(read_bytes.size() == kLen);
  REQUIRE(std::equal(read_bytes.begin(), read_bytes.end(), gen.a.mem.begin() + 8192));
  REQUIRE(std::equal(r.mem.begin(), r.mem.begin() + kLen, gen.a.mem.begin() + 8192));
  CHECK(r.t.qp_counters(r.qpn)->drops[static_cast<std::size_t>(common::DropReason::kBadIcrc)] == 1);
}

TEST_CASE("IRN: a packet whose XETH does not match its message's known place is checked before it is placed", "[core][icrc]") {
  // A one-packet WRITE to [8192, 9216) (done), then a 3-packet WRITE to
  // [0, 3072). Corrupted copies of the second WRITE's packets whose XETH
  // names another place (its va moved onto the done range, its offset off
  // the PSN's, a message not known yet) must leave memory as it is.
  QpSetup s;
  s.mode = Reliability::kIrn;
  s.mtu = 1024;
  Loop gen(kMem, s);
  REQUIRE(gen.ok);
  gen.record = true;
  constexpr uint32_t kLen = 3 * 1024;
  fill_pattern(gen.a.mem, 16384, 1024, 9);
  fill_pattern(gen.a.mem, 8192, kLen, 8);
  REQUIRE(gen.send(gen.a, make_wr(IBV_WR_RDMA_WRITE, 1, gen.a, 16384, 1024, &gen.b, 8192)) == 0);
  REQUIRE(gen.send(gen.a, make_wr(IBV_WR_RDMA_WRITE, 2, gen.a, 8192, kLen, &gen.b, 0)) == 0);
  gen.settle();
  std::vector<Frame> f(4);
  std::vector<std::vector<uint8_t>> sent(4);
  std::vector<bool> have(4);
  for (const auto& bytes : gen.sent_by_a) {
    Frame x;
    REQUIRE(make_frame(bytes, x));
    const uint8_t op = x.pkt.bth.opcode;
    const int k = op == IBV_OPCODE_RC_RDMA_WRITE_ONLY ? 0
                  : op == IBV_OPCODE_RC_RDMA_WRITE_FIRST ? 1
                  : op == IBV_OPCODE_RC_RDMA_WRITE_MIDDLE ? 2
                  : op == IBV_OPCODE_RC_RDMA_WRITE_LAST ? 3 : -1;
    if (k < 0 || have[k]) continue;
    have[k] = true;
    f[k] = std::move(x);
    sent[k] = bytes;
  }
  REQUIRE(std::count(have.begin(), have.end(), true) == 4);
  auto corrupted = [&](int k, auto&& edit) {
    std::vector<uint8_t> b = sent[k];
    edit(b.data() + f[k].pkt.payload_offset);  // the XETH
    Frame x;
    REQUIRE(make_frame(std::move(b), x));
    return x;
  };

  Rx r;
  make_rx(r, gen.b, s, gen.a.qpn);
  uint64_t now = 1'000'000;
  auto feed = [&](const Frame& fr) {
    const RxPacketRef in = fr.ref();
    common::DropReason why;
    r.t.on_packets(&in, 1, now, &why);
    now += 1000;
    return why;
  };
  // A message not known yet: its last packet, a payload byte flipped.
  const Frame unknown = corrupted(3, [](uint8_t* x) { x[kXethLen + 5] ^= 0x20; });
  REQUIRE(feed(unknown) == common::DropReason::kBadIcrc);
  REQUIRE(std::all_of(r.mem.begin(), r.mem.begin() + kLen, [](uint8_t c) { return c == 0; }));
  REQUIRE(feed(f[0]) == common::DropReason::kNone);  // the one-packet WRITE
  REQUIRE(feed(f[1]) == common::DropReason::kNone);  // the first packet: the message is known
  const std::vector<uint8_t> before = r.mem;
  // The middle packet's va moved so that it lands on the done WRITE's range.
  const Frame moved = corrupted(2, [](uint8_t* x) {
    common::store_be64(x + 16, common::load_be64(x + 16) + 8192 - 1024);
  });
  REQUIRE(feed(moved) == common::DropReason::kBadIcrc);
  // Its offset one byte off (the good packet would leave the byte after it).
  const Frame skewed = corrupted(2, [](uint8_t* x) { common::store_be32(x + 4, common::load_be32(x + 4) + 1); });
  REQUIRE(feed(skewed) == common::DropReason::kBadIcrc);
  // Its rkey or its message length changed.
  REQUIRE(feed(corrupted(2, [](uint8_t* x) { x[15] ^= 0x01; })) == common::DropReason::kBadIcrc);
  REQUIRE(feed(corrupted(2, [](uint8_t* x) { x[11] ^= 0x04; })) == common::DropReason::kBadIcrc);
  REQUIRE(r.mem == before);
  REQUIRE(feed(f[2]) == common::DropReason::kNone);
  REQUIRE(feed(f[3]) == common::DropReason::kNone);
  REQUIRE(std::equal(r.mem.begin(), r.mem.begin() + kLen, gen.a.mem.begin() + 8192));
  REQUIRE(std::equal(r.mem.begin() + 8192, r.mem.begin() + 9216, gen.a.mem.begin() + 16384));
}
