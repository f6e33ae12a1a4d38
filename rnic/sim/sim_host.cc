#include "rnic/sim/sim_host.h"

#include <algorithm>
#include <cstring>

#include "common/wire/entropy.h"
#include "common/wire/opcode.h"
#include "common/wire/psn.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/frame.h"
#include "rnic/core/policy_factory.h"
#include "rnic/sim/path_discovery.h"
#include "rnic/sim/scenario.h"
#include "rnic/sim/workload.h"

namespace tandem::rnic::sim {

namespace {

constexpr uint64_t kRecvBit = 1ull << 63;
constexpr uint32_t kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

uint64_t wr_id(uint32_t conn, uint32_t msg, bool recv) noexcept {
  return (uint64_t{conn} << 32) | msg | (recv ? kRecvBit : 0);
}

common::MacAddr host_mac(uint32_t host) noexcept {
  return {0x02, 0x54, static_cast<uint8_t>(host >> 16), static_cast<uint8_t>(host >> 8),
          static_cast<uint8_t>(host), 0x01};
}

uint32_t pow2_at_least(uint64_t n) noexcept {
  uint32_t p = 1;
  while (p < n && p < (1u << 30)) p <<= 1;
  return p;
}

}  // namespace

SimHost::SimHost(uint32_t index, const HostOptions& opt, Fabric& fabric, EventQueue& events,
                 FramePool& frames, std::vector<Conn>& conns, std::vector<std::unique_ptr<SimHost>>& hosts,
                 WorkloadTotals& totals, const HostJitterSpec& jitter)
    : index_(index), opt_(opt), fabric_(fabric), events_(events), frames_(frames), conns_(conns),
      hosts_(hosts), totals_(totals), jitter_rng_(derive_seed(0x6a177e4, index)), jit_(jitter),
      stall_clock_(jitter.stall, derive_seed(0x57a11ed, index)) {
  if (stall_clock_.enabled()) events_.push(stall_clock_.next_gap_ns(), EventKind::kHostStall, index_, 0);
}

void SimHost::finish_memory(uint32_t qps) {
  TransportConfig cfg;
  cfg.max_qps = std::max<uint32_t>(qps, 1);
  cfg.qpn_base = 0x100 + index_ * 0x10;  // distinct QPNs per host make traces easier to read
  qpn_base_ = cfg.qpn_base;
  rx_high_psn_.assign(cfg.max_qps, 0);
  rx_seen_.assign(cfg.max_qps, 0);
  first_rx_.assign(cfg.max_qps, 0);
  cfg.max_cqs = 1;
  cfg.max_mrs = 4;
  cfg.tx_queue_capacity = pow2_at_least(opt_.tx_queue_capacity);
  cfg.credit.rate_gbps = opt_.credit_rate_gbps;
  cfg.credit.jitter_mitigation = opt_.jitter_mitigation;
  cfg.credit.window_pkts = opt_.credit_window_pkts;
  cfg.credit.headroom_pkts = opt_.credit_headroom_pkts;
  cfg.credit.batch_pkts = opt_.credit_batch_pkts;
  transport_ = std::make_unique<Transport>(cfg);
  const uint64_t size = std::max<uint64_t>(arena_size_, 4096);
  arena_ = Arena(size);
  if (opt_.int_telemetry) rx_int_.assign(cfg.max_qps, IntEcho{});
  mr_ = transport_->reg_mr(arena_.get(), size, kAccess);
  if (mr_.len == 0) throw ScenarioError("host " + std::to_string(index_) + ": reg_mr failed");
  uint64_t cq_entries = 64;
  for (const Conn& c : conns_) {
    if (c.src == index_ || c.dst == index_) cq_entries += 2 * c.outstanding + 2;
  }
  cq_ = transport_->create_cq(pow2_at_least(cq_entries));
  if (cq_ == UINT32_MAX) throw ScenarioError("host " + std::to_string(index_) + ": create_cq failed");
  spray_sets_.assign(fabric_.host_count(), {});
  spray_next_.assign(fabric_.host_count(), 0);
}

void SimHost::create_qp_for(Conn& c, bool sender) {
  QpInitAttr init;
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.sq_depth = pow2_at_least(c.outstanding + 1);
  init.rq_depth = pow2_at_least(c.outstanding + 1);
  init.mode = opt_.mode;
  init.window_pkts = opt_.window_pkts;
  init.policy.path = opt_.path_policy.c_str();
  init.policy.cc = opt_.cc_policy.c_str();
  init.policy.cc_window_bytes = opt_.cc_window_bytes;
  init.policy.num_paths = opt_.num_paths;
  init.policy.line_rate_gbps = opt_.line_rate_gbps;
  init.policy.credit_unsched_bytes = opt_.credit_unsched_bytes;
  uint32_t qpn = transport_->create_qp(init);
  if (qpn == 0) {
    throw ScenarioError("host " + std::to_string(index_) + ": create_qp refused the policy (path '" +
                        opt_.path_policy + "', cc '" + opt_.cc_policy + "', window " +
                        std::to_string(opt_.window_pkts) + ")");
  }
  (sender ? c.src_qpn : c.dst_qpn) = qpn;
}

uint16_t SimHost::choose_path_seed(const Conn& c, bool sender, uint32_t base) const {
  // The core's path policy derives its source ports from the QP's path seed;
  // try seeds and keep one that uses the fabric well: a multi-path set that
  // reaches as many distinct routes as it has paths, or, with one path per QP
  // and several QPs per flow, the flow's k-th distinct route for its k-th QP.
  if (!opt_.path_seed_search) return static_cast<uint16_t>(base);
  if (opt_.num_paths <= 1 && opt_.qps_per_flow <= 1) return static_cast<uint16_t>(base);
  const uint32_t peer = sender ? c.dst : c.src;
  auto policy = make_path_policy(opt_.path_policy.c_str());
  if (!policy) return static_cast<uint16_t>(base);
  std::vector<uint32_t> target;
  if (opt_.num_paths <= 1) {
    const auto paths = discover_paths(fabric_, index_, peer);
    if (paths.empty()) return static_cast<uint16_t>(base);
    target = trace_route(fabric_, index_, peer, paths[c.qp_in_flow % paths.size()]);
  }
  uint16_t best_seed = static_cast<uint16_t>(base);
  std::size_t best = 0;
  for (uint32_t k = 0; k < 1024; ++k) {
    auto seed = static_cast<uint16_t>(base + k * 7919);
    policy->reset(PathPolicyParams{sender ? c.src_qpn : c.dst_qpn, seed, opt_.num_paths});
    if (!target.empty()) {
      if (trace_route(fabric_, index_, peer, policy->choose(0, false, 0)) == target) return seed;
      continue;
    }
    std::vector<std::vector<uint32_t>> routes;
    for (uint32_t i = 0; i < opt_.num_paths * 4; ++i) {
      auto r = trace_route(fabric_, index_, peer, policy->choose(i, false, 0));
      if (!r.empty() && std::find(routes.begin(), routes.end(), r) == routes.end()) routes.push_back(r);
    }
    if (routes.size() > best) {
      best = routes.size();
      best_seed = seed;
      if (best >= opt_.num_paths) break;
    }
  }
  return best_seed;
}

void SimHost::connect_qp(Conn& c, bool sender, uint32_t rq_psn, uint32_t sq_psn, uint16_t path_seed) {
  const uint32_t qpn = sender ? c.src_qpn : c.dst_qpn;
  const uint32_t peer_qpn = sender ? c.dst_qpn : c.src_qpn;
  const uint32_t peer_host = sender ? c.dst : c.src;
  QpAttr a;
  a.state = QpState::kInit;
  a.qp_access_flags = kAccess;
  int rc = transport_->modify_qp(qpn, a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
  a.state = QpState::kRtr;
  a.path_mtu = opt_.mtu;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = rq_psn;
  a.peer = host_ip(peer_host);
  a.path_seed = path_seed;
  a.reorder_delay_ns = opt_.reorder_delay_ns;
  a.ack_every = opt_.ack_every;
  a.cnp_interval_ns = opt_.cnp_interval_ns;
  a.min_rnr_timer = 1;
  if (rc == 0) {
    rc = transport_->modify_qp(qpn, a,
                               IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_AV |
                                   IBV_QP_MIN_RNR_TIMER);
  }
  a.state = QpState::kRts;
  a.sq_psn = sq_psn;
  a.timeout_ns = opt_.timeout_ns;
  a.retry_cnt = opt_.retry_cnt;
  a.rnr_retry = 7;
  if (rc == 0) {
    rc = transport_->modify_qp(qpn, a,
                               IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
  }
  if (rc != 0) {
    throw ScenarioError("host " + std::to_string(index_) + ": modify_qp to RTS failed (errno " +
                        std::to_string(rc) + ", mtu " + std::to_string(opt_.mtu) + ")");
  }
}

void SimHost::post_initial_recvs(Conn& c) {
  if (!opt_.send_op) return;
  while (c.next_recv < c.sizes.size() && c.next_recv < c.outstanding) post_recv(c);
}

void SimHost::post_recv(Conn& c) {
  const uint32_t j = c.next_recv++;
  RecvWr wr;
  wr.wr_id = wr_id(c.index, j, true);
  wr.num_sge = 1;
  wr.sg_list[0] = Sge{mr_.addr + c.recv_off + (j % c.outstanding) * c.slot_bytes,
                      static_cast<uint32_t>(c.slot_bytes), mr_.lkey};
  if (transport_->post_recv(c.dst_qpn, wr) != 0) ++totals_.errors;
}

void SimHost::start_conn(Conn& c, uint64_t now) {
  if (stalled_) {  // the application's first posts wait for the loop
    deferred_starts_.push_back(&c);
    return;
  }
  if (c.dynamic_mem && c.next_post == 0) {
    c.send_off = take_slots(c.outstanding * c.slot_bytes);
    c.recv_off = hosts_[c.dst]->take_slots(c.outstanding * c.slot_bytes);
  }
  while (c.next_post < c.sizes.size() && c.next_post - c.completed < c.outstanding) post_message(c, now);
  service(now);
}

void SimHost::post_message(Conn& c, uint64_t now) {
  const uint32_t j = c.next_post++;
  const uint64_t len = c.sizes[j];
  const uint64_t slot = (j % c.outstanding) * c.slot_bytes;
  const uint64_t msg_id = wr_id(c.index, j, false);
  SimHost& peer = *hosts_[c.dst];
  if (opt_.read_op) {
    // READ: the data lives at the destination (its application wrote it);
    // the local buffer is cleared so stale bytes cannot pass the check.
    fill_pattern(peer.arena_.get() + c.recv_off + slot, peer.index_, msg_id, 0, len);
    std::memset(arena_.get() + c.send_off + slot, 0, len);
  } else {
    // The application writes the message into its buffer, then posts it.
    fill_pattern(arena_.get() + c.send_off + slot, index_, msg_id, 0, len);
  }
  SendWr wr;
  wr.wr_id = msg_id;
  wr.opcode = opt_.read_op ? IBV_WR_RDMA_READ : opt_.send_op ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.remote_addr = peer.arena_addr() + c.recv_off + slot;
  wr.rkey = peer.mr_.rkey;
  wr.num_sge = 1;
  wr.sg_list[0] = Sge{mr_.addr + c.send_off + slot, static_cast<uint32_t>(len), mr_.lkey};
  c.post_ns[j] = now;
  totals_.first_post_ns = std::min(totals_.first_post_ns, now);
  if (transport_->post_send(c.src_qpn, wr) != 0) ++totals_.errors;
}

void SimHost::drain_cq(uint64_t now) {
  // The core's completions go to the application's CQ ring; an application
  // that polls late (host jitter) handles them a while later.
  Completion wc[32];
  for (;;) {
    const uint32_t n = transport_->poll_cq(cq_, wc, 32);
    cqes_.insert(cqes_.end(), wc, wc + n);
    if (n < 32) break;
  }
  if (cqes_.empty()) return;
  if (jit_.app_late_ns == 0) {
    reap(now);
  } else if (!app_armed_) {
    app_armed_ = true;
    events_.push(now + stall_clock_.uniform(jit_.app_late_ns), EventKind::kHostApp, index_);
  }
}

void SimHost::on_app(uint64_t now) {
  app_armed_ = false;
  if (stalled_) return;  // resume() runs service, which wakes it again
  reap(now);
  service(now);
}

void SimHost::reap(uint64_t now) {
  // Handled one at a time: a completion may post a message whose own
  // completion lands in cqes_ later (never during this loop).
  std::vector<Completion> wc;
  wc.swap(cqes_);
  {
    const uint32_t n = static_cast<uint32_t>(wc.size());
    for (uint32_t i = 0; i < n; ++i) {
      const bool recv = (wc[i].wr_id & kRecvBit) != 0;
      Conn& c = conns_[static_cast<uint32_t>((wc[i].wr_id & ~kRecvBit) >> 32)];
      const auto j = static_cast<uint32_t>(wc[i].wr_id);
      if (!recv && c.measured) ++totals_.measured_completed;
      if (wc[i].status != IBV_WC_SUCCESS) {
        // Flushed or failed work requests never count as completed.
        ++totals_.errors;
        continue;
      }
      const uint64_t slot = (j % c.outstanding) * c.slot_bytes;
      if (recv) {
        // SEND: the receiving application checks what landed in its buffer.
        SimHost& sender = *hosts_[c.src];
        const bool ok = wc[i].byte_len == c.sizes[j] &&
                        check_pattern(arena_.get() + c.recv_off + slot, sender.index_, wr_id(c.index, j, false), 0,
                                      c.sizes[j]) < 0;
        if (ok) {
          ++c.verified;
          ++totals_.verified;
        } else {
          ++totals_.mismatches;
        }
        if (c.next_recv < c.sizes.size()) post_recv(c);
        if (c.verified == c.sizes.size()) release_slots(c, c.recv_off, c.outstanding * c.slot_bytes);
        continue;
      }
      // Sender completion: the message is done.
      ++c.completed;
      ++totals_.completed;
      totals_.bytes += c.sizes[j];
      totals_.fct_ns.push_back(now - c.post_ns[j]);
      if (totals_.keep_done && c.measured) totals_.done.push_back(MessageDone{c.index, j, now - c.post_ns[j]});
      totals_.last_completion_ns = std::max(totals_.last_completion_ns, now);
      if (!opt_.send_op) {
        // RDMA WRITE: a completion means the data is placed at the responder;
        // RDMA READ: that the remote bytes are in the local buffer.
        SimHost& peer = *hosts_[c.dst];
        const bool ok = opt_.read_op
                            ? check_pattern(arena_.get() + c.send_off + slot, peer.index_, wr_id(c.index, j, false),
                                            0, c.sizes[j]) < 0
                            : check_pattern(peer.arena_.get() + c.recv_off + slot, index_,
                                            wr_id(c.index, j, false), 0, c.sizes[j]) < 0;
        if (ok) {
          ++c.verified;
          ++totals_.verified;
        } else {
          ++totals_.mismatches;
        }
        if (c.completed == c.sizes.size()) {  // both ends' slots are done with
          release_slots(c, c.send_off, c.outstanding * c.slot_bytes);
          peer.release_slots(c, c.recv_off, c.outstanding * c.slot_bytes);
        }
      } else if (c.completed == c.sizes.size()) {
        release_slots(c, c.send_off, c.outstanding * c.slot_bytes);
      }
      while (c.next_post < c.sizes.size() && c.next_post - c.completed < c.outstanding) post_message(c, now);
    }
  }
}

void SimHost::on_frame(uint32_t frame, uint64_t now) {
  if (stalled_ || !rx_backlog_.empty()) {
    // The loop is not running (or still working off what came meanwhile):
    // the frame waits in the RX ring, or is dropped if the ring is full.
    if (rx_backlog_.size() >= jit_.rx_ring) {
      ++nic_.rx_ring_drops;
      frames_.release(frame);
      return;
    }
    rx_backlog_.push_back(frame);
    nic_.rx_backlog_max = std::max(nic_.rx_backlog_max, static_cast<uint32_t>(rx_backlog_.size()));
    return;
  }
  receive(frame, now);
  service(now);
}

void SimHost::on_stall_event(uint64_t what, uint64_t now) {
  // A software RNIC's loop: a burst of up to 32 frames, then poll and TX.
  constexpr uint32_t kBurst = 32;
  constexpr uint64_t kFrameNs = 100;  // the loop's cost per received frame while catching up
  if (what == 0) {
    if (stalled_) return;
    stalled_ = true;
    const uint64_t len = stall_clock_.next_length_ns();
    ++nic_.stalls;
    nic_.stalled_ns += len;
    events_.push(now + len, EventKind::kHostStall, index_, 1);
    return;
  }
  if (what == 1) {
    stalled_ = false;
    events_.push(now + stall_clock_.next_gap_ns(), EventKind::kHostStall, index_, 0);
    std::vector<Conn*> starts;
    starts.swap(deferred_starts_);
    for (Conn* c : starts) start_conn(*c, now);
  }
  if (stalled_) return;
  uint32_t n = 0;
  while (n < kBurst && !rx_backlog_.empty()) {
    const uint32_t frame = rx_backlog_.front();
    rx_backlog_.pop_front();
    receive(frame, now);
    ++n;
  }
  service(now);
  if (!rx_backlog_.empty()) events_.push(now + n * kFrameNs, EventKind::kHostStall, index_, 2);
}

void SimHost::receive(uint32_t frame, uint64_t now) {
  Frame& f = frames_[frame];
  ++nic_.rx_frames;
  common::RocePacket pkt;
  if (common::parse_roce(f.data, f.len, pkt) != common::DropReason::kNone) {
    ++nic_.rx_parse_drops;
  } else {
    if (!f.retransmit) note_arrival_order(pkt);
    if (pkt.payload_len != 0 && (common::opcode_info(pkt.bth.opcode).flags & common::kOpRequest)) {
      const uint32_t q = pkt.bth.dqpn - qpn_base_;
      if (q < first_rx_.size() && first_rx_[q] == 0) first_rx_[q] = now;
    }
    if (!rx_int_.empty()) {
      // INT: a data frame's records wait for the ACK that answers it; an
      // ACK's echo goes to its QP's policy before the ACK itself.
      if (f.int_stamp && f.int_rec.hops != 0) {
        const uint32_t q = pkt.bth.dqpn - qpn_base_;
        if (q < rx_int_.size()) rx_int_[q] = f.int_rec;
      } else if (f.int_echo) {
        if (CcPolicy* cc = transport_->cc_policy(pkt.bth.dqpn)) cc->on_int(f.int_rec, now);
      }
    }
    if (transport_->on_packet(pkt, f.data + pkt.payload_offset, pkt.payload_len, now) !=
             common::DropReason::kNone) {
      ++nic_.rx_rejected;
    }
  }
  frames_.release(frame);
}

void SimHost::note_arrival_order(const common::RocePacket& pkt) noexcept {
  // Reordering as the wire delivers it, the same measure in every mode: how
  // far behind the highest request PSN already seen a first transmission
  // arrives (retransmissions are late by nature and not counted).
  if (!(common::opcode_info(pkt.bth.opcode).flags & (common::kOpRequest | common::kOpReadResp))) return;
  const uint32_t q = pkt.bth.dqpn - qpn_base_;
  if (q >= rx_seen_.size()) return;
  if (!rx_seen_[q]) {
    rx_seen_[q] = 1;
    rx_high_psn_[q] = pkt.bth.psn;
    return;
  }
  const int32_t behind = common::psn_diff(rx_high_psn_[q], pkt.bth.psn);
  if (behind > 0) {
    nic_.reorder_depth_max = std::max(nic_.reorder_depth_max, static_cast<uint32_t>(behind));
  } else {
    rx_high_psn_[q] = pkt.bth.psn;
  }
}

void SimHost::on_nic_idle(uint64_t now) { kick_nic(now); }

void SimHost::on_timer(uint64_t generation, uint64_t now) {
  if (generation != timer_gen_) return;  // superseded by an earlier deadline
  timer_at_ = kNever;
  service(now);  // a stalled host re-arms when it resumes
}

void SimHost::service(uint64_t now) {
  if (stalled_) return;
  // Completions first (the application may post), then let the core run its
  // timers and queue what may go now, then the application again.
  for (int round = 0; round < 4; ++round) {
    drain_cq(now);
    transport_->poll(now);
    const uint64_t before = totals_.completed + totals_.verified + totals_.errors;
    drain_cq(now);
    if (totals_.completed + totals_.verified + totals_.errors == before) break;
  }
  kick_nic(now);
  arm_timer(now);
}

const std::vector<uint16_t>& SimHost::spray_set(uint32_t peer_host) {
  auto& s = spray_sets_[peer_host];
  if (s.empty()) s = discover_paths(fabric_, index_, peer_host, opt_.spray_paths);
  return s;
}

void SimHost::kick_nic(uint64_t now) {
  while (!send_one(now)) {
  }
}

bool SimHost::send_one(uint64_t now) {
  if (!fabric_.host_port_idle(index_, now)) return true;
  TxQueue& tx = transport_->tx();
  // A stalled loop queues nothing new; what it queued before still goes.
  if (tx.empty() && stalled_) return true;
  if (tx.empty()) {
    transport_->poll(now);
    if (tx.empty()) {
      arm_timer(now);
      return true;
    }
  }
  TxDesc d = tx.front();
  tx.pop();
  if (transport_->pending() && !stalled_) transport_->poll(now);  // room again in the TX queue
  if (gate_ != nullptr && !gate_->egress_ok(index_, d.local_qpn, now)) {
    ++nic_.route_drops;  // the worker's kTableMiss drop; the core retransmits it later
    return false;
  }
  const uint32_t peer_host = ip_host(d.peer);
  if (opt_.nic_spray && peer_host < fabric_.host_count()) {
    const auto& set = spray_set(peer_host);
    if (!set.empty()) d.udp_sport = set[spray_next_[peer_host]++ % set.size()];
  }
  const uint32_t flags = common::opcode_info(d.bth.opcode).flags;
  if ((flags & (common::kOpRequest | common::kOpReadResp)) && d.payload_len > 0) {
    ++nic_.data_pkts;
    if (d.retransmit) {
      ++nic_.retx_pkts;
      nic_.retx_bytes += d.payload_len;
    }
  }
  FrameAddrs addrs;
  addrs.src_mac = host_mac(index_);
  addrs.dst_mac = host_mac(peer_host);
  addrs.src_ip = host_ip(index_);
  addrs.dst_ip = d.peer;
  const uint32_t id = frames_.alloc();
  Frame& f = frames_[id];
  f.len = static_cast<uint32_t>(build_frame(d, addrs, f.data, f.cap));
  f.clear_meta();
  f.retransmit = d.retransmit;
  if (!rx_int_.empty()) {
    if ((flags & common::kOpRequest) && d.payload_len > 0) {
      f.int_stamp = true;  // the switches stamp it; its INT header costs wire bytes
      f.wire_extra = kIntHeaderBytes;
    } else if (d.bth.opcode == IBV_OPCODE_RC_ACKNOWLEDGE || d.bth.opcode == IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE) {
      const uint32_t q = d.local_qpn - qpn_base_;
      if (q < rx_int_.size() && rx_int_[q].hops != 0) {
        f.int_echo = true;
        f.int_rec = rx_int_[q];
      }
    }
  }
  if (f.len == 0) {
    frames_.release(id);
    ++nic_.rx_parse_drops;
    return true;
  }
  if ((opt_.credit_jitter_ns || jit_.ack_delay_ns) &&
      (d.bth.opcode == IBV_OPCODE_RC_ACKNOWLEDGE || d.bth.opcode == IBV_OPCODE_RC_ATOMIC_ACKNOWLEDGE)) {
    // Processing delay in the credit loop: the ACK leaves up to
    // credit_jitter later (the NIC goes on with other frames meanwhile);
    // host jitter's late ACK generation adds its own delay.
    uint64_t delay = opt_.credit_jitter_ns ? jitter_rng_.between(0, opt_.credit_jitter_ns) : 0;
    if (jit_.ack_delay_ns) delay += stall_clock_.uniform(jit_.ack_delay_ns);
    events_.push(now + delay, EventKind::kHostDelayedTx, index_, id);
    return false;  // the port is still idle: pull the next descriptor
  }
  fabric_.send_from_host(index_, id, now);
  return true;
}

void SimHost::send_delayed(uint32_t frame, uint64_t now) { fabric_.send_from_host(index_, frame, now); }

void SimHost::arm_timer(uint64_t now) {
  uint64_t d = transport_->next_deadline();
  if (d == kNever) return;
  if (d <= now) {
    // Work the core could not do yet (its TX queue is full): the NIC polls
    // again as it drains; otherwise come back a nanosecond later.
    if (transport_->pending()) return;
    d = now + 1;
  }
  if (d >= timer_at_) return;
  timer_at_ = d;
  events_.push(d, EventKind::kHostTimer, index_, ++timer_gen_);
}

}  // namespace tandem::rnic::sim
