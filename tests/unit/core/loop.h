// A tiny deterministic two-host loop for the transport core's tests: two
// Transports with one connected QP each, frames serialised with build_frame
// and parsed back with parse_roce, and a seeded "network" that drops,
// delays, reorders and duplicates them.
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "common/wire/roce_packet.h"
#include "rnic/core/frame.h"
#include "rnic/core/transport.h"

namespace tandem::rnic::test {

struct NetConfig {
  double loss = 0.0;            // per frame, both directions
  uint64_t delay_ns = 2'000;
  uint64_t jitter_ns = 0;       // uniform extra delay: reorders frames
  double duplicate = 0.0;       // per frame
};

struct Host {
  explicit Host(std::size_t mem_bytes, const TransportConfig& cfg = {})
      : t(cfg), mem(mem_bytes) {
    mr = t.reg_mr(mem.data(), mem.size(),
                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    cq = t.create_cq(1 << 14);
  }
  Transport t;
  std::vector<uint8_t> mem;
  MemoryRegion mr;
  uint32_t cq = 0;
  uint32_t qpn = 0;
  std::vector<Completion> done;

  uint64_t va(uint64_t off) const { return mr.addr + off; }
  void drain_cq() {
    Completion c[64];
    while (uint32_t n = t.poll_cq(cq, c, 64)) done.insert(done.end(), c, c + n);
  }
  const QpCounters& counters() const { return *t.qp_counters(qpn); }
};

struct QpSetup {
  Reliability mode = Reliability::kIrn;
  uint32_t mtu = 1024;
  uint32_t window = 1024;
  uint32_t sq_psn_a = 100, sq_psn_b = 5000;
  uint64_t timeout_ns = 200'000;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint64_t reorder_delay_ns = 20'000;
  uint32_t access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  uint32_t sq_depth = 512, rq_depth = 512;
  uint64_t cc_window = 1ull << 20;
  const char* cc = "fixed_window";
  const char* path = "single";
  uint32_t num_paths = 1;
  uint64_t credit_unsched_bytes = 64 << 10;
  uint32_t max_inline = 0;           // SendSlots' inline bytes per WR
  bool complete_unsignaled = false;  // every send WR completes (kWcUnsignaled)
  bool standard_peer = false;        // QpAttr::standard_peer at RTR (a plain RoCE peer)
};

inline int bring_up(Transport& t, uint32_t qpn, uint32_t remote_qpn, uint32_t sq_psn, uint32_t rq_psn,
                    const QpSetup& s, uint32_t peer) {
  QpAttr a;
  a.state = QpState::kInit;
  a.qp_access_flags = s.access;
  if (int r = t.modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS)) return r;
  a.state = QpState::kRtr;
  a.path_mtu = s.mtu;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = rq_psn;
  a.peer = peer;
  a.reorder_delay_ns = s.reorder_delay_ns;
  a.min_rnr_timer = 1;  // 10 us
  a.standard_peer = s.standard_peer;
  if (int r = t.modify_qp(qpn, a,
                          IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_AV |
                              IBV_QP_MIN_RNR_TIMER))
    return r;
  a.state = QpState::kRts;
  a.sq_psn = sq_psn;
  a.timeout_ns = s.timeout_ns;
  a.retry_cnt = s.retry_cnt;
  a.rnr_retry = s.rnr_retry;
  return t.modify_qp(qpn, a,
                     IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
}

inline int bring_up(Host& h, uint32_t remote_qpn, uint32_t sq_psn, uint32_t rq_psn,
                    const QpSetup& s, uint32_t peer) {
  return bring_up(h.t, h.qpn, remote_qpn, sq_psn, rq_psn, s, peer);
}

// Moves h's QP to ERR (verbs: its outstanding work flushes) and collects the
// completions that produces.
inline int move_to_error(Host& h) {
  QpAttr a;
  a.state = QpState::kError;
  const int r = h.t.modify_qp(h.qpn, a, IBV_QP_STATE);
  h.drain_cq();
  return r;
}

// The QP a Loop gives each side: `s`'s mode, depths and policies, both
// queues on `cq`.
inline QpInitAttr qp_init(const QpSetup& s, uint32_t cq) {
  QpInitAttr init;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.mode = s.mode;
  init.window_pkts = s.window;
  init.sq_depth = s.sq_depth;
  init.rq_depth = s.rq_depth;
  init.policy.cc_window_bytes = s.cc_window;
  init.policy.cc = s.cc;
  init.policy.path = s.path;
  init.policy.num_paths = s.num_paths;
  init.policy.credit_unsched_bytes = s.credit_unsched_bytes;
  init.max_inline = s.max_inline;
  init.complete_unsignaled = s.complete_unsignaled;
  return init;
}

class Loop {
 public:
  Loop(std::size_t mem_bytes, const QpSetup& s = {}, const NetConfig& net = {},
       uint64_t seed = 1, const TransportConfig& cfg = {})
      : a(mem_bytes, cfg), b(mem_bytes, cfg), setup(s), net(net), rng(seed) {
    a.qpn = a.t.create_qp(qp_init(s, a.cq));
    b.qpn = b.t.create_qp(qp_init(s, b.cq));
    ok = a.qpn && b.qpn && bring_up(a, b.qpn, s.sq_psn_a, s.sq_psn_b, s, 2) == 0 &&
         bring_up(b, a.qpn, s.sq_psn_b, s.sq_psn_a, s, 1) == 0;
  }

  Host a, b;
  QpSetup setup;
  NetConfig net;
  std::mt19937_64 rng;
  bool ok = false;
  uint64_t now = 1'000;
  uint64_t frames = 0, dropped = 0;
  bool block_a_to_b = false;  // drop everything A sends
  // Optional hook to look at (and veto) every frame: return false to drop.
  std::function<bool(bool from_a, const common::RocePacket&)> filter;
  // Optional hook giving a frame's delay instead of net.delay_ns + jitter
  // (e.g. a slow or queued path for some of them).
  std::function<uint64_t(bool from_a, const common::RocePacket&)> delay;

  int send(Host& h, const SendWr& wr) { return h.t.post_send(h.qpn, wr); }
  int recv(Host& h, const RecvWr& wr) { return h.t.post_recv(h.qpn, wr); }

  // Runs until `pred` holds or nothing is left to do; false on a stall.
  template <class Pred>
  bool run(Pred pred, uint64_t max_events = 5'000'000) {
    for (uint64_t i = 0; i < max_events; ++i) {
      pump();
      a.drain_cq();
      b.drain_cq();
      if (pred()) return true;
      uint64_t next = std::min(a.t.next_deadline(), b.t.next_deadline());
      if (!wire_.empty()) next = std::min(next, wire_.begin()->first);
      if (next == kNever) return pred();
      now = std::max(now, next);
      deliver_due();
    }
    return false;
  }
  bool settle() { return run([] { return false; }) || true; }

  // Every frame ever sent from A, most recent last (for replay tests).
  std::vector<std::vector<uint8_t>> sent_by_a;
  bool record = false;

  // Delivers a raw frame to a host now.
  common::DropReason inject(Host& to, const std::vector<uint8_t>& f) {
    common::RocePacket p;
    auto r = common::parse_roce(f.data(), f.size(), p);
    if (r != common::DropReason::kNone) return r;
    return to.t.on_packet(p, f.data() + p.payload_offset, p.payload_len, now);
  }

 private:
  struct Frame {
    bool to_b;
    std::vector<uint8_t> bytes;
  };
  std::multimap<uint64_t, Frame> wire_;
  uint8_t buf_[9100];

  void pump() {
    for (int round = 0; round < 1000; ++round) {
      a.t.poll(now);
      b.t.poll(now);
      if (a.t.tx().empty() && b.t.tx().empty()) break;
      drain(a, true);
      drain(b, false);
    }
  }

  void drain(Host& h, bool from_a) {
    std::uniform_real_distribution<double> u(0, 1);
    while (!h.t.tx().empty()) {
      const TxDesc& d = h.t.tx().front();
      if (TxQueue::dropped(d)) {  // its region was deregistered: nothing of it is sent
        h.t.tx().pop();
        continue;
      }
      FrameAddrs fa;
      fa.src_ip = from_a ? 1 : 2;
      fa.dst_ip = from_a ? 2 : 1;
      const std::size_t n = build_frame(d, fa, buf_, sizeof buf_);
      h.t.tx().pop();
      if (n == 0) continue;
      ++frames;
      std::vector<uint8_t> f(buf_, buf_ + n);
      if (record && from_a) sent_by_a.push_back(f);
      if (filter) {
        common::RocePacket p;
        common::parse_roce(f.data(), f.size(), p);
        if (!filter(from_a, p)) { ++dropped; continue; }
      }
      if ((from_a && block_a_to_b) || u(rng) < net.loss) { ++dropped; continue; }
      const uint64_t jit = net.jitter_ns ? rng() % net.jitter_ns : 0;
      uint64_t dly = net.delay_ns + jit, dup_dly = net.delay_ns + jit / 2;
      if (delay) {
        common::RocePacket p;
        common::parse_roce(f.data(), f.size(), p);
        dly = dup_dly = delay(from_a, p);
      }
      if (u(rng) < net.duplicate) wire_.emplace(now + dup_dly, Frame{from_a, f});
      wire_.emplace(now + dly, Frame{from_a, std::move(f)});
    }
  }

  void deliver_due() {
    while (!wire_.empty() && wire_.begin()->first <= now) {
      auto node = wire_.extract(wire_.begin());
      Frame& f = node.mapped();
      inject(f.to_b ? b : a, f.bytes);
    }
  }
};

inline SendWr make_wr(ibv_wr_opcode op, uint64_t wr_id, const Host& local, uint64_t loff,
                      uint32_t len, const Host* remote = nullptr, uint64_t roff = 0,
                      uint32_t imm = 0) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.num_sge = 1;
  wr.sg_list[0] = Sge{local.va(loff), len, local.mr.lkey};
  wr.imm_data = imm;
  if (remote) {
    wr.remote_addr = remote->va(roff);
    wr.rkey = remote->mr.rkey;
  }
  return wr;
}

inline RecvWr make_recv(uint64_t wr_id, const Host& h, uint64_t off, uint32_t len) {
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.num_sge = 1;
  wr.sg_list[0] = Sge{h.va(off), len, h.mr.lkey};
  return wr;
}

inline void fill_pattern(std::vector<uint8_t>& m, std::size_t off, std::size_t len, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < len; ++i) {
    x = x * 1103515245u + 12345u;
    m[off + i] = static_cast<uint8_t>(x >> 16);
  }
}

}  // namespace tandem::rnic::test
