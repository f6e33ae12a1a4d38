// The agent's end of a channel a worker can scribble on (common/channel
// ring_view.h, channel_view.h): the agent's own geometry and index, the
// peer's index checked, reads and writes only inside the channel.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/channel/channel_region.h"
#include "common/channel/channel_view.h"

using namespace tandem::common;

namespace {

// rte_ring's layout in DPDK 22.11 (dpu/dpdk/channel_file.cc takes it from the struct).
RingLayout ring_layout(uint32_t count) {
  RingLayout r;
  r.prod_head = 128;
  r.prod_tail = 132;
  r.cons_head = 256;
  r.cons_tail = 260;
  r.elems = 384;
  r.size = count;
  r.capacity = count - 1;
  r.fixed_bytes = 60;
  return r;
}

uint32_t& u32(uint8_t* ring, uint32_t off) { return *reinterpret_cast<uint32_t*>(ring + off); }

RawMessage msg(uint32_t i) {
  RawMessage m;
  std::memcpy(m.bytes + 4, &i, sizeof i);
  return m;
}
uint32_t id(const RawMessage& m) {
  uint32_t i;
  std::memcpy(&i, m.bytes + 4, sizeof i);
  return i;
}

// A channel region in an exactly sized allocation with guard pages around it
// (ASan would see a stray access; the guards catch it without ASan).
struct Region {
  static constexpr std::size_t kGuard = 4096;
  ChannelGeometry g;
  std::size_t size = compute_layout(g).total_bytes;
  uint8_t* mem = static_cast<uint8_t*>(std::aligned_alloc(4096, size + 2 * kGuard));
  uint8_t* base = mem + kGuard;
  ChannelView view;

  Region() {
    std::memset(mem, 0xA5, size + 2 * kGuard);
    std::memset(base, 0, size);
    REQUIRE(init_channel(base, size, g, 0, "rnic0").empty());
    const ChannelLayout l = compute_layout(g);
    RingLayout rl = ring_layout(g.ring_count);
    for (uint64_t off : {l.cmd_ring_offset, l.evt_ring_offset}) {
      std::memcpy(base + off, "tdc_rnic0", 9);  // what rte_ring_init writes in its fixed bytes
      u32(base + off, 48) = g.ring_count;
    }
    REQUIRE(ChannelView::fits(size, g, rl));
    view = ChannelView(base, size, g, rl, RingProducer(base + l.cmd_ring_offset, rl),
                       RingConsumer(base + l.evt_ring_offset, rl));
  }
  ~Region() { std::free(mem); }
  bool guards_intact() const {
    for (std::size_t i = 0; i < kGuard; ++i)
      if (mem[i] != 0xA5 || base[size + i] != 0xA5) return false;
    return true;
  }
};

}  // namespace

TEST_CASE("ring ends pass messages in order across many wraps") {
  std::vector<uint8_t> buf(384 + 8 * 64);
  RingLayout l = ring_layout(8);
  RingProducer p(buf.data(), l);
  RingConsumer c(buf.data(), l);
  uint32_t sent = 0, got = 0;
  for (int round = 0; round < 100; ++round) {
    RawMessage in[5], out[8];
    for (uint32_t i = 0; i < 5; ++i) in[i] = msg(sent + i);
    uint32_t k = p.enqueue(in, 5);
    sent += k;
    uint32_t n = c.dequeue(out, 8);
    for (uint32_t i = 0; i < n; ++i) REQUIRE(id(out[i]) == got + i);
    got += n;
  }
  CHECK(got == sent);
  CHECK(sent == 500);
  RawMessage full[9];
  CHECK(p.enqueue(full, 9) == 7);  // capacity: size - 1, as rte_ring
  CHECK(p.fault() == RingFault::kNone);
}

TEST_CASE("an impossible peer index is a fault: nothing is moved, nothing written") {
  std::vector<uint8_t> buf(384 + 8 * 64 + 64, 0);
  RingLayout l = ring_layout(8);
  RingProducer p(buf.data(), l);
  RingConsumer c(buf.data(), l);
  RawMessage m[4] = {msg(1), msg(2), msg(3), msg(4)};
  REQUIRE(p.enqueue(m, 4) == 4);
  std::vector<uint8_t> before = buf;
  SECTION("a consumer index ahead of the producer") {
    u32(buf.data(), l.cons_tail) = 1000;
    before = buf;
    CHECK(p.enqueue(m, 4) == 0);
    CHECK(p.fault() == RingFault::kPeerIndex);
    CHECK(buf == before);
    CHECK(p.enqueue(m, 1) == 0);  // stays faulted: the caller resets the link
  }
  SECTION("a producer index claiming more than the ring holds") {
    u32(buf.data(), l.prod_tail) = 0x7FFFFFFF;
    RawMessage out[64];
    CHECK(c.dequeue(out, 64) == 0);
    CHECK(c.fault() == RingFault::kPeerIndex);
  }
  SECTION("a scribbled mask or size in the shared header changes nothing for the agent") {
    u32(buf.data(), 48) = 0xFFFFFFFF;  // size
    u32(buf.data(), 52) = 0xFFFFFFFF;  // mask
    RawMessage out[8];
    CHECK(c.dequeue(out, 8) == 4);
    CHECK(id(out[3]) == 4);
  }
}

TEST_CASE("adopting a ring takes the shared index only if it is possible") {
  std::vector<uint8_t> buf(384 + 8 * 64, 0);
  RingLayout l = ring_layout(8);
  u32(buf.data(), l.prod_tail) = 105;
  u32(buf.data(), l.cons_tail) = 101;
  RingProducer p;
  RingConsumer c;
  REQUIRE(RingProducer::adopt(buf.data(), l, p));
  CHECK(p.index() == 105);
  REQUIRE(RingConsumer::adopt(buf.data(), l, c));
  CHECK(c.index() == 101);
  u32(buf.data(), l.cons_tail) = 90;  // 15 in flight in an 8-slot ring
  CHECK_FALSE(RingProducer::adopt(buf.data(), l, p));
  CHECK_FALSE(RingConsumer::adopt(buf.data(), l, c));
}

TEST_CASE("the agent's view reads the BAR and slots at its own offsets, whatever the header says") {
  Region r;
  const ChannelLayout l = compute_layout(r.g);
  auto* h = reinterpret_cast<ChannelHeader*>(r.base);
  channel_bar(r.base).heartbeat.value.store(77);
  CHECK(r.view.check() == nullptr);
  // A worker points the header's offsets and geometry far outside the file.
  h->layout.bar_offset = 1ull << 40;
  h->layout.slot_offset = 1ull << 41;
  h->geometry.slot_count = 0xFFFFFFFF;
  h->geometry.slot_size = 0xFFFFFFC0;
  CHECK(std::string(r.view.check()) == "header overwritten");
  CHECK(r.view.bar().heartbeat.value.load() == 77);
  // Slots: in range, a length beyond the slot, out of range.
  auto* s = reinterpret_cast<SlotHeader*>(r.base + l.slot_offset + 3 * r.g.slot_size);
  s->generation.store(9);
  s->length = 0xFFFFFFFF;
  uint8_t out[4096];
  std::size_t len = 99;
  CHECK(r.view.read_slot(3, 9, out, sizeof out, len) == ChannelView::SlotRead::kOk);
  CHECK(len == slot_payload_capacity(r.g));
  CHECK(r.view.read_slot(3, 8, out, sizeof out, len) == ChannelView::SlotRead::kReused);
  CHECK(r.view.read_slot(r.g.slot_count, 9, out, sizeof out, len) == ChannelView::SlotRead::kOutOfRange);
  CHECK(r.view.read_slot(0xFFFFFFFF, 9, out, sizeof out, len) == ChannelView::SlotRead::kOutOfRange);
  CHECK(r.guards_intact());
}

TEST_CASE("the view tells a scribbled ring header and an impossible index apart, and retire() marks the file") {
  Region r;
  const ChannelLayout l = compute_layout(r.g);
  RingLayout rl = ring_layout(r.g.ring_count);
  SECTION("ring fixed bytes") {
    u32(r.base + l.evt_ring_offset, 52) = 3;  // the event ring's mask
    CHECK(std::string(r.view.check()) == "event ring header overwritten");
  }
  SECTION("event ring producer index") {
    u32(r.base + l.evt_ring_offset, rl.prod_tail) = 1u << 31;
    RawMessage out[64];
    CHECK(r.view.events().dequeue(out, 64) == 0);
    CHECK(std::string(r.view.check()) == "event ring: producer index impossible");
  }
  SECTION("command ring consumer index") {
    u32(r.base + l.cmd_ring_offset, rl.cons_tail) = 12345;
    RawMessage in[4];
    CHECK(r.view.commands().enqueue(in, 4) == 0);
    CHECK(std::string(r.view.check()) == "command ring: consumer index impossible");
  }
  r.view.retire();
  CHECK(reinterpret_cast<ChannelNotice*>(r.base + kNoticeOffset)->retired.load() == 1);
  CHECK(check_channel(r.base, r.size).empty());  // an older worker still reads the file as valid
  CHECK(r.guards_intact());
}
