// libFuzzer target: the agent's end of a DPU channel while a compromised
// worker writes anything anywhere in the channel file. The region is one
// exact heap allocation, so ASan sees any agent access outside it; the agent
// reads and writes it only through its own ChannelView (its geometry and ring
// ends, common/channel/channel_view.h) and its AgentChannel state machine,
// as tandem-dpu's loop does. When the view reports a violation the agent does
// what tandem-dpu does: retire the file, make a fresh one, transport_reset.
//
// Input: records of an op byte and its operands:
//   0 scribble: u16 offset, u8 len (<= 64), bytes   (anywhere in the file)
//   1 event: 64 bytes enqueued as an honest worker would (at the ring's prod tail)
//   2 set the event ring's prod tail: u32            (a worker's index, any value)
//   3 set the command ring's cons tail: u32
//   4 agent service step (1 ms later)
//   5 submit a change set of one PUT: 36 bytes of entry
//   6 BAR: line index u8, u64 value
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/channel/channel_region.h"
#include "common/channel/channel_view.h"
#include "dpu/channel/agent_channel.h"

using namespace tandem::common;
using tandem::dpu::AgentChannel;
using tandem::dpu::AgentChannelConfig;
using tandem::dpu::ChangeSet;

namespace {

RingLayout ring_layout(uint32_t count) {  // DPDK 22.11's struct rte_ring
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

struct File {
  ChannelGeometry g{64, 16, 256};  // small: the fuzzer reaches every area
  ChannelLayout l = compute_layout(g);
  RingLayout rl = ring_layout(g.ring_count);
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t[], Free> buf;
  uint8_t* mem = nullptr;
  std::size_t size = l.total_bytes;
  ChannelView view;

  void make() {
    // Exactly the file's size, page-aligned as a mapping: ASan flags anything past it.
    buf.reset(static_cast<uint8_t*>(std::aligned_alloc(kPageSize, size)));
    mem = buf.get();
    std::memset(mem, 0, size);
    if (!init_channel(mem, size, g, 0, "rnic0").empty()) std::abort();
    for (uint64_t off : {l.cmd_ring_offset, l.evt_ring_offset}) std::memcpy(&mem[off + 48], &g.ring_count, 4);
    if (!ChannelView::fits(size, g, rl)) std::abort();
    view = ChannelView(mem, size, g, rl, RingProducer(&mem[l.cmd_ring_offset], rl),
                       RingConsumer(&mem[l.evt_ring_offset], rl));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  File f;
  f.make();
  AgentChannelConfig cfg;
  cfg.pipeline = true;
  AgentChannel ch("rnic0", cfg);
  uint64_t now = 1'000'000;
  ch.start(now);
  uint64_t tag = 1;
  std::size_t i = 0;
  auto take = [&](void* out, std::size_t n) {
    if (i + n > size) return false;
    std::memcpy(out, data + i, n);
    i += n;
    return true;
  };
  RawMessage burst[64];
  while (i < size) {
    const uint8_t op = data[i++] % 7;
    switch (op) {
      case 0: {
        uint16_t off;
        uint8_t len;
        if (!take(&off, 2) || !take(&len, 1)) return 0;
        len %= 65;
        std::size_t at = off % f.size;
        if (at + len > f.size) len = static_cast<uint8_t>(f.size - at);
        if (!take(&f.mem[at], len)) return 0;
        break;
      }
      case 1: {
        RawMessage m;
        if (!take(m.bytes, sizeof m.bytes)) return 0;
        uint8_t* r = &f.mem[f.l.evt_ring_offset];
        uint32_t p;
        std::memcpy(&p, r + f.rl.prod_tail, 4);
        std::memcpy(r + f.rl.elems + (p & f.rl.mask()) * kMessageSize, m.bytes, kMessageSize);
        ++p;
        std::memcpy(r + f.rl.prod_tail, &p, 4);
        break;
      }
      case 2:
      case 3: {
        uint32_t v;
        if (!take(&v, 4)) return 0;
        std::memcpy(&f.mem[(op == 2 ? f.l.evt_ring_offset + f.rl.prod_tail : f.l.cmd_ring_offset + f.rl.cons_tail)], &v, 4);
        break;
      }
      case 4: {
        now += 1'000'000;
        const uint32_t n = f.view.events().dequeue(burst, 64);
        for (uint32_t k = 0; k < n; ++k) ch.on_event(burst[k], now);
        ch.on_bar(tandem::dpu::sample_bar(f.view.bar()), now);
        ch.tick(now);
        RawMessage m;
        while (ch.pending_commands() && f.view.commands().fault() == RingFault::kNone) {
          if (!ch.pop_command(m)) break;
          if (f.view.commands().enqueue(&m, 1) == 0) break;  // full or faulted: dropped here, as unsent
        }
        ch.take_outcomes();
        uint8_t hdr[2048];
        for (const PuntMsg& p : ch.take_punts()) {
          std::size_t len = 0;
          (void)f.view.read_slot(p.slot, p.generation, hdr, sizeof hdr, len);
          if (len > slot_payload_capacity(f.g)) std::abort();
        }
        if (f.view.check()) {  // tandem-dpu: retire, new file, reset the channel
          f.view.retire();
          f.make();
          ch.transport_reset(now, "fuzz");
        }
        break;
      }
      case 5: {
        Level2Entry e;
        if (!take(&e, sizeof e)) return 0;
        ChangeSet cs;
        cs.tag = tag++;
        cs.put(e);
        ch.submit(std::move(cs));
        break;
      }
      case 6: {
        uint8_t line;
        uint64_t v;
        if (!take(&line, 1) || !take(&v, 8)) return 0;
        std::memcpy(&f.mem[f.l.bar_offset + (line % 18) * 64], &v, 8);
        break;
      }
    }
  }
  return 0;
}
