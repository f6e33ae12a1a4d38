// Test harness: a loopback "RNIC" for tandem-perf. A real HostServer on a
// real Unix socket, polled by a thread that executes each WQE by copying
// between the two applications' registered memory (both attach to this one
// worker; the QP's dest_qp_num names the peer QP on the same server). It
// stands in for tandem-rnic's transport so the tool's logic (exchange,
// posting, completions, verification, reports) can be tested end to end; the
// real run goes through tandem-rnic and the wire.
//
// Semantics kept from RC: per-QP order, a SEND waits for a posted receive
// (RNR with infinite retry), remote access checked by rkey/bounds/access
// flags (REM_ACCESS_ERR), a vanished peer QP ends in RETRY_EXC_ERR.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rnic/host/host_server.h"

namespace tandem::rnic::perf::test {

class LoopbackWorker {
 public:
  explicit LoopbackWorker(const std::string& socket_path) {
    host::ServerConfig c;
    c.socket_path = socket_path;
    server_ = std::make_unique<host::HostServer>(c);
    thread_ = std::thread([this] { run(); });
  }
  ~LoopbackWorker() { stop(); }
  LoopbackWorker(const LoopbackWorker&) = delete;
  LoopbackWorker& operator=(const LoopbackWorker&) = delete;

  void stop() {
    if (!thread_.joinable()) return;
    stop_ = true;
    thread_.join();
    server_.reset();
  }

  // Flips one byte (the middle one) of the n-th message placed (1-based).
  void corrupt_message(uint64_t n) { corrupt_at_ = n; }
  uint64_t messages_placed() const { return placed_.load(); }

 private:
  static uint64_t now_ns() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }

  void run() {
    int idle = 0;
    std::vector<host::SendWork> batch(64);
    while (!stop_) {
      server_->poll(now_ns());
      host::HostEvent e;
      while (server_->next_event(&e))
        if (e.kind == host::HostEventKind::kQpDestroyed) held_.erase(e.qpn);
      uint32_t ready[64];
      bool busy = false;
      std::size_t n;
      while ((n = server_->ready_qps(ready)) > 0) {
        for (std::size_t k = 0; k < n; ++k) {
          std::size_t got;
          while ((got = server_->fetch_send(ready[k], batch)) > 0) {
            auto& q = held_[ready[k]];
            q.insert(q.end(), batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(got));
            busy = true;
          }
        }
      }
      bool waiting = false;
      for (auto& [qpn, q] : held_) {
        busy |= execute(qpn, q);
        waiting |= !q.empty();
      }
      idle = busy ? 0 : idle + 1;
      if (waiting || idle < 256) {
        if (!busy) std::this_thread::yield();
        continue;
      }
      if (server_->begin_idle()) {
        epoll_event ev;
        epoll_wait(server_->wait_fd(), &ev, 1, 1);
        server_->end_idle();
      }
      idle = 0;
    }
  }

  // Flattens a WQE's payload (SGEs or inline bytes).
  static void gather(const host::SendWork& w, std::vector<uint8_t>& out) {
    out.resize(w.length);
    if (w.inline_len > 0 || (w.send_flags & IBV_SEND_INLINE)) {
      std::memcpy(out.data(), w.inline_data, w.inline_len);
      return;
    }
    std::size_t off = 0;
    for (uint32_t i = 0; i < w.num_sge; ++i) {
      std::memcpy(out.data() + off, w.sge[i].addr, w.sge[i].length);
      off += w.sge[i].length;
    }
  }

  static void scatter(const uint8_t* src, std::size_t len, const host::Segment* sge, uint32_t num) {
    std::size_t off = 0;
    for (uint32_t i = 0; i < num && off < len; ++i) {
      std::size_t n = std::min<std::size_t>(sge[i].length, len - off);
      std::memcpy(sge[i].addr, src + off, n);
      off += n;
    }
  }

  void placed(uint8_t* first_byte, std::size_t len) {
    uint64_t n = ++placed_;
    if (n == corrupt_at_ && len > 0) first_byte[len / 2] ^= 0xff;
  }

  // Executes queued WQEs of one QP in order; stops at a SEND with no receive
  // posted at the peer (RNR) or a full CQ. True if anything was done.
  bool execute(uint32_t qpn, std::deque<host::SendWork>& q) {
    bool did = false;
    while (!q.empty()) {
      const host::QpInfo* me = server_->qp_info(qpn);
      if (me == nullptr) {
        q.clear();
        return true;
      }
      if (server_->cq_space(qpn, true) == 0) break;
      host::SendWork& w = q.front();
      uint32_t dest = me->dest_qp_num;
      const host::QpInfo* peer = server_->qp_info(dest);
      if (peer == nullptr || peer->state == IBV_QPS_ERR) {
        server_->complete_send(qpn, w, IBV_WC_RETRY_EXC_ERR);  // the peer never answers
        q.pop_front();
        did = true;
        continue;
      }
      if (peer->state != IBV_QPS_RTR && peer->state != IBV_QPS_RTS) break;
      ibv_wc_status st = IBV_WC_SUCCESS;
      switch (w.opcode) {
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM: {
          bool imm = w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
          host::RecvWork rw[1];
          if (imm && (server_->recv_queued(dest) == 0 || server_->cq_space(dest, false) == 0)) return did;
          uint8_t* dst = server_->translate_remote(dest, w.rkey, w.remote_addr, w.length,
                                                   IBV_ACCESS_REMOTE_WRITE);
          if (dst == nullptr) {
            st = IBV_WC_REM_ACCESS_ERR;
            break;
          }
          gather(w, scratch_);
          std::memcpy(dst, scratch_.data(), w.length);
          placed(dst, w.length);
          if (imm && server_->fetch_recv(dest, rw) == 1)
            server_->complete_recv(dest, rw[0], IBV_WC_SUCCESS, w.length, IBV_WC_RECV_RDMA_WITH_IMM, true,
                                   w.imm_data, qpn);
          break;
        }
        case IBV_WR_SEND:
        case IBV_WR_SEND_WITH_IMM: {
          if (server_->recv_queued(dest) == 0 || server_->cq_space(dest, false) == 0) return did;  // RNR
          host::RecvWork rw[1];
          if (server_->fetch_recv(dest, rw) != 1) return did;
          if (rw[0].length < w.length) {
            server_->complete_recv(dest, rw[0], IBV_WC_LOC_LEN_ERR, 0, IBV_WC_RECV, false, 0, qpn);
            st = IBV_WC_REM_INV_REQ_ERR;
            break;
          }
          gather(w, scratch_);
          scatter(scratch_.data(), w.length, rw[0].sge, rw[0].num_sge);
          if (rw[0].num_sge > 0) placed(rw[0].sge[0].addr, std::min(w.length, rw[0].sge[0].length));
          bool imm = w.opcode == IBV_WR_SEND_WITH_IMM;
          server_->complete_recv(dest, rw[0], IBV_WC_SUCCESS, w.length, IBV_WC_RECV, imm, w.imm_data, qpn);
          break;
        }
        case IBV_WR_RDMA_READ: {
          uint8_t* src = server_->translate_remote(dest, w.rkey, w.remote_addr, w.length,
                                                   IBV_ACCESS_REMOTE_READ);
          if (src == nullptr) {
            st = IBV_WC_REM_ACCESS_ERR;
            break;
          }
          scatter(src, w.length, w.sge, w.num_sge);
          if (w.num_sge > 0) placed(w.sge[0].addr, std::min(w.length, w.sge[0].length));
          break;
        }
        default:
          st = IBV_WC_REM_INV_REQ_ERR;
      }
      server_->complete_send(qpn, w, st);
      q.pop_front();
      did = true;
    }
    return did;
  }

  std::unique_ptr<host::HostServer> server_;
  std::unordered_map<uint32_t, std::deque<host::SendWork>> held_;
  std::vector<uint8_t> scratch_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> corrupt_at_{0};
  std::atomic<uint64_t> placed_{0};
  std::thread thread_;
};

}  // namespace tandem::rnic::perf::test
