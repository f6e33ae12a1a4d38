// A channel file in plain memory for the agent core (dpu/agent) and a fake
// worker on its other ends: the RNIC's channel state machine and level-2
// table (rnic/table) pumped over the same rings and BAR, as DpuLink does in
// tandem-rnic. Each file is shared by the agent's mapping and the worker
// (shared_ptr): a file the agent replaced stays alive while the worker
// still maps it, as an unlinked file does.
#pragma once

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "common/channel/channel_region.h"
#include "common/channel/channel_view.h"
#include "dpu/agent/channel_source.h"
#include "rnic/table/level2_table.h"
#include "rnic/table/rnic_channel.h"

namespace tandem::test {

using namespace tandem::common;

// rte_ring's layout in DPDK 22.11 (dpu/dpdk/channel_file.cc takes it from the struct).
inline RingLayout fake_ring_layout(uint32_t count) {
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

struct FakeFile {
  ChannelGeometry g{1024, 64, 512};
  ChannelLayout l = compute_layout(g);
  RingLayout rl = fake_ring_layout(g.ring_count);
  uint8_t* mem = static_cast<uint8_t*>(std::aligned_alloc(kPageSize, l.total_bytes));
  uint64_t id;

  explicit FakeFile(const std::string& rnic, uint64_t file_id) : id(file_id) {
    std::memset(mem, 0, l.total_bytes);
    init_channel(mem, l.total_bytes, g, 0, rnic);
    for (uint64_t off : {l.cmd_ring_offset, l.evt_ring_offset}) {
      std::memcpy(mem + off, "fake_ring", 9);  // rte_ring_init's name and size in the fixed bytes
      std::memcpy(mem + off + 48, &g.ring_count, 4);
    }
  }
  ~FakeFile() { std::free(mem); }
  FakeFile(const FakeFile&) = delete;
  FakeFile& operator=(const FakeFile&) = delete;
  bool retired() const {
    return reinterpret_cast<const ChannelNotice*>(mem + kNoticeOffset)->retired.load() != 0;
  }
};

class FakeMapping final : public dpu::ChannelMapping {
 public:
  FakeMapping(std::shared_ptr<FakeFile> f, std::string path, bool reused)
      : f_(std::move(f)), path_(std::move(path)), reused_(reused) {
    view_ = ChannelView(f_->mem, f_->l.total_bytes, f_->g, f_->rl, RingProducer(f_->mem + f_->l.cmd_ring_offset, f_->rl),
                        RingConsumer(f_->mem + f_->l.evt_ring_offset, f_->rl));
  }
  ChannelView& view() noexcept override { return view_; }
  const std::string& path() const noexcept override { return path_; }
  bool reused() const noexcept override { return reused_; }

 private:
  std::shared_ptr<FakeFile> f_;
  std::string path_;
  bool reused_;
  ChannelView view_;
};

// The channel directory: the current file of each RNIC.
class FakeOpener final : public dpu::ChannelOpener {
 public:
  std::unique_ptr<dpu::ChannelMapping> open(const std::string& rnic, uint32_t, bool fresh) override {
    auto& f = files[rnic];
    const bool reused = f && !fresh;
    if (!reused) f = std::make_shared<FakeFile>(rnic, ++opened);
    return std::make_unique<FakeMapping>(f, path_of(rnic), reused);
  }
  std::string path_of(const std::string& rnic) const override { return "/fake/tandem-" + rnic + ".chan"; }
  std::map<std::string, std::shared_ptr<FakeFile>> files;
  uint64_t opened = 0;
};

// A worker in DPU mode, as far as its channel goes.
struct FakeWorker {
  FakeOpener& dir;
  std::string name;
  rnic::Level2Table table;
  rnic::RnicChannel ch;
  std::shared_ptr<FakeFile> file;
  RingConsumer cmds;
  RingProducer events;
  uint32_t next_slot = 0;
  uint64_t reattached = 0;
  bool alive = true;

  // `hash`: the table's key hash (Level2TableConfig::hash; null: the keyed one).
  FakeWorker(FakeOpener& d, std::string n, uint32_t capacity = 4096, uint64_t instance = 7,
             uint64_t (*hash)(const EntryKey&) noexcept = nullptr)
      : dir(d), name(std::move(n)), table({capacity, hash}), ch(table, config(instance)) {}
  static rnic::RnicChannelConfig config(uint64_t instance) {
    rnic::RnicChannelConfig c;
    c.rnic_instance = instance;
    c.agent_timeout_ns = 3'000'000'000ull;
    return c;
  }
  // DpuLink: attach to the current file; a retired one (or a newer file) is replaced.
  void attach() {
    auto it = dir.files.find(name);
    if (it == dir.files.end()) return;
    if (file && file != it->second) {
      ch.rings_replaced();
      ++reattached;
    }
    file = it->second;
    // The ring indices live in the file (rte_ring's): a worker restarted
    // over a live file carries on from them.
    RingConsumer::adopt(file->mem + file->l.cmd_ring_offset, file->rl, cmds);
    RingProducer::adopt(file->mem + file->l.evt_ring_offset, file->rl, events);
    announce_rnic(*reinterpret_cast<ChannelHeader*>(file->mem), kOurVersions, 1234);
  }
  void step(uint64_t now) {
    if (!alive) return;
    auto it = dir.files.find(name);
    if (!file || (it != dir.files.end() && it->second != file)) attach();
    if (!file) return;
    RawMessage in[64];
    uint32_t n;
    while ((n = cmds.dequeue(in, 64)) > 0) ch.on_commands(in, n, now);
    ch.tick(now);
    RawMessage m;
    while (const RawMessage* head = ch.peek_event()) {
      if (held(*head)) break;
      if (events.enqueue(head, 1) == 0) break;
      ch.pop_event(m);
    }
    ch.publish(*reinterpret_cast<Bar*>(file->mem + file->l.bar_offset));
  }
  // The newest version every lcore of the worker sees: a COMMITTED or
  // HELLO_ACK naming a newer one waits, and what follows it (commit_fanout.h).
  uint64_t visible = ~uint64_t{0};
  bool held(const RawMessage& m) const {
    if (m.type() == MessageType::kCommitted) return as<CommittedMsg>(m).version > visible;
    if (m.type() == MessageType::kHelloAck) return as<HelloAckMsg>(m).committed_version > visible;
    return false;
  }
  // A table miss: headers in a slot, PUNT to the agent.
  void punt(const EntryKey& key) {
    uint8_t hdr[64] = {};
    std::memcpy(hdr, &key, sizeof key);
    const uint32_t slot = next_slot++ % file->g.slot_count;
    const uint32_t gen = slot_write(file->mem, slot, hdr, sizeof hdr);
    ch.punt(slot, gen, sizeof hdr, 0, key);
  }
  bool has(const EntryKey& k) const { return table.lookup(table.begin_read(), k) != nullptr; }
};

}  // namespace tandem::test
