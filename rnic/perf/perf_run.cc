#include "rnic/perf/perf_run.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log/log.h"
#include "rnic/host/verbs.h"
#include "rnic/perf/oob_channel.h"
#include "rnic/perf/oob_messages.h"
#include "rnic/perf/pattern.h"
#include "rnic/perf/perf_report.h"
#include "rnic/perf/perf_stats.h"
#include "rnic/perf/verbs_objects.h"

namespace tandem::rnic::perf {

namespace host = tandem::rnic::host;

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

constexpr uint64_t kNs = 1'000'000'000;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr uint32_t kPostBatch = 32;
constexpr uint32_t kServerDirection = 1u << 31;  // pattern key of server->client data (latency)

// A failure of the run itself (not of the command line): exit 1.
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* wc_status_name(int s) {
  switch (s) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "work request flushed";
    case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_REM_OP_ERR: return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
    default: return "error";
  }
}

ibv_mtu mtu_enum(uint32_t mtu) {
  switch (mtu) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
  }
}

std::string gid_text(const uint8_t* g) {
  char b[64];
  std::snprintf(b, sizeof b, "::ffff:%u.%u.%u.%u", g[12], g[13], g[14], g[15]);
  return b;
}

// The parameters both sides run with (the client's, sent in ParamsMsg).
struct Plan {
  TestKind test;
  uint64_t size;
  uint64_t iterations;  // 0: run for duration_s
  double duration_s;
  uint32_t qps;
  uint32_t tx_depth;
  uint32_t mtu;
  uint32_t slots;       // message slots per QP in the target region
  bool verify;

  bool latency() const { return is_latency(test); }
  // Bytes per QP: the target region (slots x size), plus a source region of
  // one message for the ping-pong tests, which write both ways.
  uint64_t target_bytes() const { return slots * size; }
  uint64_t per_qp_bytes() const { return latency() ? 2 * size : slots * size; }
  // Sends a QP keeps outstanding: with --verify no more than there are slots,
  // so a slot is never refilled (or read back) while a message still uses it.
  uint32_t window() const {
    uint32_t w = verify ? std::min(tx_depth, slots) : tx_depth;
    return std::max<uint32_t>(1, std::min<uint32_t>(w, host::kMaxQueueDepth / (2 * qps)));
  }
};

Plan plan_from(const Options& o) {
  Plan p{o.test, o.size, o.iterations, o.duration_s, o.qps, o.tx_depth, o.mtu, 1, o.verify};
  if (!p.latency()) {
    uint64_t fit = std::max<uint64_t>(1, kMaxBufferBytes / (o.size * o.qps));
    uint64_t cq_fit = std::max<uint64_t>(1, host::kMaxQueueDepth / (2 * o.qps));
    // send_bw: the receiver keeps 4x the sender's window posted (perftest's
    // rx depth 512 vs tx depth 128), so a message rarely finds no receive (RNR)
    // while the previous ones are being reposted.
    uint64_t want = o.test == TestKind::kSendBw ? uint64_t{4} * o.tx_depth : o.tx_depth;
    p.slots = static_cast<uint32_t>(std::min<uint64_t>({want, fit, cq_fit}));
  }
  return p;
}

// One side's verbs objects; released in reverse order (close_device would
// free them anyway).
struct Resources : VerbsObjects {
  std::vector<uint32_t> psn;

  uint8_t* target(uint32_t q, const Plan& p) const { return buf + q * p.per_qp_bytes(); }
  uint8_t* slot(uint32_t q, uint32_t s, const Plan& p) const { return target(q, p) + s * p.size; }
  uint8_t* source(uint32_t q, const Plan& p) const { return target(q, p) + p.size; }  // latency
  uint32_t qp_index(uint32_t qpn) const {
    auto it = index_of.find(qpn);
    if (it == index_of.end()) throw RunError("completion for unknown QPN " + std::to_string(qpn));
    return it->second;
  }
};

[[noreturn]] void host_fail(const char* what) {
  throw RunError(std::string(what) + ": " + host::last_error());
}

void create_resources(Resources& r, const Plan& p) {
  r.pd = host::alloc_pd(r.ctx);
  if (!r.pd) host_fail("alloc_pd");
  r.buf_len = p.per_qp_bytes() * p.qps;
  r.buf = static_cast<uint8_t*>(host::alloc_buf(r.ctx, r.buf_len));
  if (!r.buf) host_fail("alloc_buf");
  std::memset(r.buf, 0, r.buf_len);
  r.mr = host::reg_mr(r.pd, r.buf, r.buf_len, kAccess);
  if (!r.mr) host_fail("reg_mr");
  uint32_t rq = p.test == TestKind::kSendBw ? p.slots : p.test == TestKind::kSendLat ? 4 : 1;
  uint32_t sq = std::max<uint32_t>(p.window(), p.latency() ? 16 : 1);
  uint64_t cqe = std::min<uint64_t>(host::kMaxQueueDepth, uint64_t{p.qps} * (sq + rq));
  r.cq = host::create_cq(r.ctx, static_cast<int>(cqe));
  if (!r.cq) host_fail("create_cq");
  std::random_device rd;
  for (uint32_t q = 0; q < p.qps; ++q) {
    host::QpInitAttr init;
    init.send_cq = r.cq;
    init.recv_cq = r.cq;
    init.cap.max_send_wr = sq;
    init.cap.max_recv_wr = rq;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = p.latency() ? host::kMaxInline : 0;
    host::Qp* qp = host::create_qp(r.pd, &init);
    if (!qp) host_fail("create_qp");
    r.qps.push_back(qp);
    r.psn.push_back(rd() & 0xffffff);
    r.index_of[qp->qp_num] = q;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = kAccess;
    if (host::modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      host_fail("modify_qp to INIT");
  }
}

QpDest local_dest(const Resources& r, uint32_t q, const Plan& p, const uint8_t gid[16]) {
  QpDest d{};
  d.magic = kOobMagic;
  d.qpn = r.qps[q]->qp_num;
  d.psn = r.psn[q];
  d.rkey = r.mr->rkey;
  d.va = reinterpret_cast<uintptr_t>(r.target(q, p));
  d.length = p.target_bytes();
  std::memcpy(d.gid, gid, 16);
  return d;
}

void connect_qp(host::Qp* qp, uint32_t my_psn, const QpDest& d, const Plan& p) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu_enum(p.mtu);
  a.dest_qp_num = d.qpn;
  a.rq_psn = d.psn;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, d.gid, 16);
  if (host::modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    host_fail("modify_qp to RTR");
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = my_psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;  // 7: retry forever, so a receiver that reposts late only slows send_bw down
  a.max_rd_atomic = 16;
  if (host::modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC))
    host_fail("modify_qp to RTS");
}

void post_recv_slot(Resources& r, const Plan& p, uint32_t q, uint32_t s) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(r.slot(q, s, p)), static_cast<uint32_t>(p.size), r.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = s;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (host::post_recv(r.qps[q], &wr, &bad)) host_fail("post_recv");
}

// Watches for the things that end a run from outside: the peer closing the
// TCP exchange, the worker going away, no progress for timeout_s.
class Watchdog {
 public:
  Watchdog(OobChannel& oob, host::Context* ctx, double timeout_s, bool watch_peer)
      : oob_(oob), ctx_(ctx), timeout_ns_(static_cast<uint64_t>(timeout_s * kNs)), watch_peer_(watch_peer) {
    last_progress_ = next_check_ = now_ns();
  }
  void progress(uint64_t now) { last_progress_ = now; }
  // Called when a poll found nothing; checks at most every millisecond.
  void idle(uint64_t now) {
    if (now < next_check_) return;
    next_check_ = now + 1'000'000;
    if (watch_peer_ && oob_.peer_closed()) throw RunError("peer disconnected during the run");
    if (!host::worker_alive(ctx_)) throw RunError("RNIC worker went away during the run");
    if (now - last_progress_ > timeout_ns_)
      throw RunError("no progress for " + std::to_string(timeout_ns_ / kNs) + " s");
    std::this_thread::yield();  // share the core with a worker on the same machine
  }

 private:
  OobChannel& oob_;
  host::Context* ctx_;
  uint64_t timeout_ns_;
  bool watch_peer_;
  uint64_t last_progress_, next_check_;
};

void check_wc(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS)
    throw RunError(std::string("completion error on QPN ") + std::to_string(wc.qp_num) + ": " +
                   wc_status_name(wc.status) + " (status " + std::to_string(wc.status) + ")");
}

std::optional<Mismatch> check_message(std::span<const uint8_t> msg, uint32_t key, uint32_t q,
                                      uint64_t iteration) {
  std::size_t off = find_mismatch(msg, key, iteration);
  if (off == kNoMismatch) return std::nullopt;
  return Mismatch{q, iteration, off, pattern_byte(key, iteration, off), msg[off]};
}

// ------------------------------------------------------------------ bandwidth

struct BwResult {
  std::vector<uint64_t> done;  // per QP
  BwMeter meter;
  std::optional<Mismatch> mismatch;
  uint64_t bad_messages = 0;
};

// The client's side of write_bw / send_bw / read_bw: keep window() sends in
// flight per QP, count completions (every send is signaled: completion of
// message i frees its slot), check READ data as it lands.
BwResult client_bw(Resources& r, const Plan& p, OobChannel& oob, const Options& o,
                   const std::vector<QpDest>& peer) {
  BwResult res;
  res.done.assign(p.qps, 0);
  std::vector<uint64_t> posted(p.qps, 0);
  uint32_t window = p.window();
  Watchdog dog(oob, r.ctx, o.timeout_s, true);
  ibv_wr_opcode op = p.test == TestKind::kWriteBw  ? IBV_WR_RDMA_WRITE
                     : p.test == TestKind::kSendBw ? IBV_WR_SEND
                                                   : IBV_WR_RDMA_READ;
  uint64_t start = now_ns();
  uint64_t end = p.iterations ? ~uint64_t{0} : start + static_cast<uint64_t>(p.duration_s * kNs);
  uint64_t limit = p.iterations ? p.iterations : ~uint64_t{0};
  res.meter.start(start);
  bool posting = true;
  ibv_send_wr wrs[kPostBatch];
  ibv_sge sges[kPostBatch];
  ibv_wc wc[64];
  for (;;) {
    uint64_t now = now_ns();
    if (now >= end) posting = false;
    bool busy = false;
    if (posting) {
      bool all_posted = true;
      for (uint32_t q = 0; q < p.qps; ++q) {
        uint32_t n = 0;
        while (n < kPostBatch && posted[q] < limit && posted[q] - res.done[q] < window) {
          uint64_t i = posted[q]++;
          uint32_t s = static_cast<uint32_t>(i % p.slots);
          uint8_t* src = r.slot(q, s, p);
          if (p.verify && op != IBV_WR_RDMA_READ) fill_pattern({src, p.size}, q, i);
          sges[n] = {reinterpret_cast<uintptr_t>(src), static_cast<uint32_t>(p.size), r.mr->lkey};
          ibv_send_wr& w = wrs[n];
          w = {};
          w.wr_id = i;
          w.sg_list = &sges[n];
          w.num_sge = 1;
          w.opcode = op;
          w.send_flags = IBV_SEND_SIGNALED;
          w.wr.rdma.remote_addr = peer[q].va + s * p.size;
          w.wr.rdma.rkey = peer[q].rkey;
          if (n > 0) wrs[n - 1].next = &w;
          ++n;
        }
        if (n > 0) {
          ibv_send_wr* bad = nullptr;
          if (host::post_send(r.qps[q], wrs, &bad)) host_fail("post_send");
          busy = true;
        }
        if (posted[q] < limit) all_posted = false;
      }
      if (all_posted) posting = false;
    }
    int got = host::poll_cq(r.cq, 64, wc);
    if (got < 0) host_fail("poll_cq");
    for (int k = 0; k < got; ++k) {
      check_wc(wc[k]);
      uint32_t q = r.qp_index(wc[k].qp_num);
      uint64_t i = res.done[q]++;
      if (op == IBV_WR_RDMA_READ && p.verify) {
        uint32_t s = static_cast<uint32_t>(i % p.slots);
        if (auto m = check_message({r.slot(q, s, p), p.size}, q, q, s)) {
          ++res.bad_messages;
          if (!res.mismatch) res.mismatch = m;
        }
      }
    }
    if (got > 0) {
      now = now_ns();
      res.meter.add(now, static_cast<uint64_t>(got) * p.size, static_cast<uint64_t>(got));
      dog.progress(now);
      busy = true;
    }
    if (!posting) {
      bool drained = true;
      for (uint32_t q = 0; q < p.qps; ++q) drained = drained && res.done[q] == posted[q];
      if (drained) break;
    }
    if (!busy) dog.idle(now);
  }
  return res;
}

// ------------------------------------------------------------------ latency

struct LatResult {
  std::vector<uint64_t> samples;  // one-way (half round trip), ns
  uint64_t iterations = 0;
  std::optional<Mismatch> mismatch;
  uint64_t bad_messages = 0;
};

// Ping-pong on QP 0. WRITE: the peer's message has arrived when the marker
// (last) byte of the target changes, as perftest's write_lat polls memory;
// SEND: when its receive completes. The client sends first.
LatResult pingpong(Resources& r, const Plan& p, OobChannel& oob, const Options& o, bool client,
                   const QpDest& peer, uint64_t* client_count) {
  LatResult res;
  bool send = p.test == TestKind::kSendLat;
  uint8_t* target = r.target(0, p);
  uint8_t* source = r.source(0, p);
  uint32_t my_key = client ? 0 : kServerDirection;
  uint32_t peer_key = client ? kServerDirection : 0;
  host::Qp* qp = r.qps[0];
  bool inl = p.size <= qp->cap.max_inline_data;
  Watchdog dog(oob, r.ctx, o.timeout_s, true);
  uint64_t outstanding = 0;
  uint64_t limit = p.iterations ? p.iterations : ~uint64_t{0};
  uint64_t end = p.iterations ? ~uint64_t{0} : now_ns() + static_cast<uint64_t>(p.duration_s * kNs);
  std::atomic_ref<uint8_t> marker(target[p.size - 1]);
  uint64_t recv_ready = 0;  // receive completions not yet consumed (send_lat)
  ibv_wc wc[16];

  auto reap = [&]() {
    int got = host::poll_cq(r.cq, 16, wc);
    if (got < 0) host_fail("poll_cq");
    for (int k = 0; k < got; ++k) {
      check_wc(wc[k]);
      if (wc[k].opcode == IBV_WC_RECV) {
        ++recv_ready;
      } else {
        --outstanding;
      }
    }
    return got > 0;
  };
  auto post = [&](uint64_t i) {
    while (outstanding >= qp->cap.max_send_wr) {
      if (!reap()) dog.idle(now_ns());
    }
    if (p.verify) fill_pattern({source, p.size - 1}, my_key, i);
    source[p.size - 1] = marker_byte(i);
    ibv_sge sge{reinterpret_cast<uintptr_t>(source), static_cast<uint32_t>(p.size), r.mr->lkey};
    ibv_send_wr w{};
    w.wr_id = i;
    w.sg_list = &sge;
    w.num_sge = 1;
    w.opcode = send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0);
    w.wr.rdma.remote_addr = peer.va;
    w.wr.rdma.rkey = peer.rkey;
    ibv_send_wr* bad = nullptr;
    if (host::post_send(qp, &w, &bad)) host_fail("post_send");
    ++outstanding;
  };
  // Waits for the peer's message i; false if the client said it is done (server).
  auto arrive = [&](uint64_t i) {
    uint32_t spins = 0;
    for (;;) {
      if (send) {
        if (recv_ready > 0) {
          --recv_ready;
          return true;
        }
      } else if (marker.load(std::memory_order_acquire) == marker_byte(i)) {
        return true;
      }
      bool got = reap();
      if (got && send && recv_ready > 0) continue;
      if (!client && (++spins & 1023) == 0 && oob.readable()) {
        DoneMsg d{};
        oob.recv_all(&d, sizeof d, o.timeout_s);
        *client_count = d.iterations[0];
        return false;
      }
      if (!got) dog.idle(now_ns());
    }
  };
  auto check = [&](uint64_t i) {
    if (!p.verify) return;
    std::span<const uint8_t> msg{target, p.size - 1};
    auto m = check_message(msg, peer_key, 0, i);
    if (!m && target[p.size - 1] != marker_byte(i))
      m = Mismatch{0, i, p.size - 1, marker_byte(i), target[p.size - 1]};
    if (m && !send) {
      // WRITE: the marker can land before the rest of a multi-packet message on
      // a transport that places out of order; wait for the rest, bounded.
      uint64_t until = now_ns() + static_cast<uint64_t>(o.timeout_s * kNs);
      while (m && now_ns() < until) {
        std::this_thread::yield();
        m = check_message(msg, peer_key, 0, i);
      }
    }
    if (m) {
      ++res.bad_messages;
      if (!res.mismatch) res.mismatch = m;
    }
  };

  if (client) {
    for (uint64_t i = 0; i < limit && now_ns() < end; ++i) {
      uint64_t t0 = now_ns();
      post(i);
      arrive(i);
      uint64_t t1 = now_ns();
      dog.progress(t1);
      res.samples.push_back((t1 - t0) / 2);
      check(i);
      if (send) post_recv_slot(r, p, 0, 0);
      res.iterations = i + 1;
    }
  } else {
    uint64_t t0 = 0;
    for (uint64_t i = 0;; ++i) {
      if (!arrive(i)) break;
      uint64_t t1 = now_ns();
      dog.progress(t1);
      if (i > 0) res.samples.push_back((t1 - t0) / 2);
      check(i);
      if (send) post_recv_slot(r, p, 0, 0);
      t0 = now_ns();
      post(i);
      res.iterations = i + 1;
    }
  }
  while (outstanding > 0) {
    if (!reap()) dog.idle(now_ns());
  }
  return res;
}

// read_lat: the client READs the server's message (one outstanding) and
// times each to its completion, a whole round trip (perftest reports read
// latency unhalved); the server only serves. With --verify the target is
// cleared before each READ and checked after it against the server's
// pattern (key kServerDirection, iteration 0).
LatResult read_latency(Resources& r, const Plan& p, const Options& o, OobChannel& oob, const QpDest& peer) {
  LatResult res;
  uint8_t* target = r.target(0, p);
  host::Qp* qp = r.qps[0];
  Watchdog dog(oob, r.ctx, o.timeout_s, true);
  const uint64_t limit = p.iterations ? p.iterations : ~uint64_t{0};
  const uint64_t end = p.iterations ? ~uint64_t{0} : now_ns() + static_cast<uint64_t>(p.duration_s * kNs);
  ibv_sge sge{reinterpret_cast<uintptr_t>(target), static_cast<uint32_t>(p.size), r.mr->lkey};
  ibv_send_wr w{};
  w.sg_list = &sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_READ;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = peer.va;
  w.wr.rdma.rkey = peer.rkey;
  ibv_wc wc{};
  for (uint64_t i = 0; i < limit && now_ns() < end; ++i) {
    if (p.verify) std::memset(target, 0, p.size);
    w.wr_id = i;
    ibv_send_wr* bad = nullptr;
    const uint64_t t0 = now_ns();
    if (host::post_send(qp, &w, &bad)) host_fail("post_send");
    int got;
    while ((got = host::poll_cq(r.cq, 1, &wc)) == 0) dog.idle(now_ns());
    const uint64_t t1 = now_ns();
    if (got < 0) host_fail("poll_cq");
    check_wc(wc);
    dog.progress(t1);
    res.samples.push_back(t1 - t0);
    if (p.verify)
      if (auto m = check_message({target, p.size}, kServerDirection, 0, 0)) {
        ++res.bad_messages;
        if (!res.mismatch) res.mismatch = m;
      }
    res.iterations = i + 1;
  }
  return res;
}

// ------------------------------------------------------------------ the run

void fill_report_verify(RunReport& rep, bool verify, const std::optional<Mismatch>& m, uint64_t bad) {
  rep.verify = !verify ? "off" : m ? "failed" : "ok";
  rep.mismatch = m;
  rep.errors += bad;
}

int finish(RunReport& rep, const Options& o) {
  if (o.json) {
    std::printf("%s\n", format_json(rep).c_str());
  } else {
    std::printf("%s", format_results(rep).c_str());
  }
  std::fflush(stdout);
  if (rep.mismatch) {
    common::log::error("verify failed: first mismatch at {}", format_mismatch(*rep.mismatch));
    return 1;
  }
  if (rep.peer_verify == "failed") {
    common::log::error("verify failed on the server: {}", rep.error);
    return 1;
  }
  if (!rep.error.empty()) {
    common::log::error("{}", rep.error);
    return 1;
  }
  return 0;
}

void print_addresses(const Options& o, const Plan& p, const std::vector<QpDest>& mine,
                     const std::vector<QpDest>& peer) {
  if (o.json) return;
  for (uint32_t q = 0; q < p.qps; ++q) {
    for (int side = 0; side < 2; ++side) {
      const QpDest& d = side == 0 ? mine[q] : peer[q];
      std::printf(" %s address: QPN 0x%06x PSN 0x%06x RKey 0x%08x VAddr 0x%016llx GID %s\n",
                  side == 0 ? "local" : "remote", d.qpn, d.psn, d.rkey,
                  static_cast<unsigned long long>(d.va), gid_text(d.gid).c_str());
    }
  }
  std::fflush(stdout);
}

void local_gid(const Options& o, const OobChannel& oob, uint8_t gid[16]) {
  std::memset(gid, 0, 16);
  gid[10] = gid[11] = 0xff;
  in_addr a{};
  if (!o.gid.empty()) {
    inet_pton(AF_INET, o.gid.c_str(), &a);
  } else {
    a.s_addr = oob.local_ipv4();
  }
  std::memcpy(gid + 12, &a.s_addr, 4);
}

int run_client(const Options& o, Resources& r) {
  Plan p = plan_from(o);
  OobChannel oob = OobChannel::connect_to(o.server, o.port, o.timeout_s);
  ParamsMsg pm{kOobMagic, kOobVersion, static_cast<uint8_t>(p.test), p.verify, p.size, p.iterations,
               p.duration_s, p.qps, p.tx_depth, p.mtu, p.slots};
  oob.send_all(&pm, sizeof pm);
  AcceptMsg acc{};
  oob.recv_all(&acc, sizeof acc, o.timeout_s);
  if (acc.magic != kOobMagic) throw RunError("the server does not speak tandem-perf's exchange");
  if (!acc.ok) throw RunError(std::string("server refused: ") + acc.error);
  create_resources(r, p);
  uint8_t gid[16];
  local_gid(o, oob, gid);
  std::vector<QpDest> peer(p.qps), mine(p.qps);
  oob.recv_all(peer.data(), peer.size() * sizeof(QpDest), o.timeout_s);
  for (uint32_t q = 0; q < p.qps; ++q) {
    if (peer[q].magic != kOobMagic) throw RunError("bad QP details from the server");
    mine[q] = local_dest(r, q, p, gid);
  }
  oob.send_all(mine.data(), mine.size() * sizeof(QpDest));
  for (uint32_t q = 0; q < p.qps; ++q) connect_qp(r.qps[q], r.psn[q], peer[q], p);
  if (p.test == TestKind::kSendLat) post_recv_slot(r, p, 0, 0);
  SyncMsg sync{kOobMagic, 1};
  oob.send_all(&sync, sizeof sync);
  oob.recv_all(&sync, sizeof sync, o.timeout_s);

  RunReport rep;
  rep.options = o;
  rep.role = "client";
  if (!o.json) std::printf("%s", format_header(rep).c_str());  // before the run, as perftest
  print_addresses(o, p, mine, peer);
  DoneMsg done{};
  done.magic = kOobMagic;
  done.qps = p.qps;
  try {
    if (p.latency()) {
      uint64_t unused = 0;
      LatResult lr = p.test == TestKind::kReadLat ? read_latency(r, p, o, oob, peer[0])
                                                  : pingpong(r, p, oob, o, true, peer[0], &unused);
      rep.have_latency = true;
      rep.latency = summarize_latency(lr.samples);
      rep.iterations = rep.messages = lr.iterations;
      done.iterations[0] = lr.iterations;
      fill_report_verify(rep, p.verify, lr.mismatch, lr.bad_messages);
    } else {
      BwResult br = client_bw(r, p, oob, o, peer);
      rep.have_bw = true;
      rep.bw_peak_gbps = done.bw_peak_gbps = br.meter.peak_gbps();
      rep.bw_avg_gbps = done.bw_avg_gbps = br.meter.avg_gbps();
      rep.msg_rate_mpps = done.msg_rate_mpps = br.meter.msg_rate_mpps();
      done.elapsed_ns = br.meter.elapsed_ns();
      for (uint32_t q = 0; q < p.qps; ++q) {
        done.iterations[q] = br.done[q];
        rep.iterations = std::max(rep.iterations, br.done[q]);
        rep.messages += br.done[q];
      }
      fill_report_verify(rep, p.verify && p.test == TestKind::kReadBw, br.mismatch, br.bad_messages);
    }
  } catch (const RunError& e) {
    rep.error = e.what();
    done.failed = 1;
  }
  if (p.verify) done.verify = rep.mismatch ? 2 : 1;
  if (rep.mismatch) {
    done.mm_qp = rep.mismatch->qp;
    done.mm_iteration = rep.mismatch->iteration;
    done.mm_offset = rep.mismatch->offset;
    done.mm_expected = rep.mismatch->expected;
    done.mm_got = rep.mismatch->got;
  }
  try {
    oob.send_all(&done, sizeof done);
    ResultMsg res{};
    oob.recv_all(&res, sizeof res, o.timeout_s + 5);
    if (res.magic != kOobMagic) throw RunError("bad result message from the server");
    if (p.verify) {
      rep.peer_verify = res.verify == 2 ? "failed" : res.verify == 1 ? "ok" : "off";
      // The server checks what it received (write_bw, send_bw, the client's half of the
      // latency tests): its verdict is part of this run's.
      if (res.verify == 2) {
        rep.verify = "failed";
        if (!rep.mismatch) {
          rep.mismatch = Mismatch{res.qp, res.iteration, res.offset, static_cast<uint8_t>(res.expected),
                                  static_cast<uint8_t>(res.got)};
          ++rep.errors;
        }
      } else if (res.verify == 1 && rep.verify == "off") {
        rep.verify = "ok";
      }
    }
    if (res.error && rep.error.empty()) rep.error = std::string("server: ") + res.text;
  } catch (const std::exception& e) {
    if (rep.error.empty()) rep.error = e.what();
  }
  return finish(rep, o);
}

// Server: waits for the client's Done while the client drives write_bw/read_bw
// (nothing completes on this side), watching for a peer or worker that goes away.
DoneMsg wait_done(OobChannel& oob, host::Context* ctx) {
  while (!oob.readable()) {
    if (oob.peer_closed()) throw RunError("peer disconnected during the run");
    if (!host::worker_alive(ctx)) throw RunError("RNIC worker went away during the run");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  DoneMsg d{};
  oob.recv_all(&d, sizeof d, 10);
  if (d.magic != kOobMagic || d.qps > kMaxQps) throw RunError("bad completion message from the client");
  return d;
}

// Server of send_bw: keep `slots` receives posted per QP, check message j of
// QP q against pattern (q, j) as it completes, repost its slot.
BwResult server_recv(Resources& r, const Plan& p, OobChannel& oob, const Options& o, DoneMsg* done) {
  BwResult res;
  res.done.assign(p.qps, 0);
  bool have_done = false;
  Watchdog dog(oob, r.ctx, o.timeout_s, true);
  res.meter.start(now_ns());
  ibv_wc wc[64];
  for (;;) {
    int got = host::poll_cq(r.cq, 64, wc);
    if (got < 0) host_fail("poll_cq");
    for (int k = 0; k < got; ++k) {
      check_wc(wc[k]);
      uint32_t q = r.qp_index(wc[k].qp_num);
      uint64_t j = res.done[q]++;
      uint32_t s = static_cast<uint32_t>(wc[k].wr_id);
      if (p.verify) {
        std::span<const uint8_t> msg{r.slot(q, s, p), p.size};
        std::optional<Mismatch> m;
        if (wc[k].byte_len != p.size) {
          m = Mismatch{q, j, wc[k].byte_len, 0, 0};  // short message: first missing byte
        } else {
          m = check_message(msg, q, q, j);
        }
        if (m) {
          ++res.bad_messages;
          if (!res.mismatch) res.mismatch = m;
        }
      }
      post_recv_slot(r, p, q, s);
    }
    uint64_t now = now_ns();
    if (got > 0) {
      res.meter.add(now, static_cast<uint64_t>(got) * p.size, static_cast<uint64_t>(got));
      dog.progress(now);
      continue;
    }
    if (!have_done && oob.readable()) {
      *done = wait_done(oob, r.ctx);
      have_done = true;
      if (done->failed) throw RunError("the client failed during the run");
    }
    if (have_done) {
      bool all = true;
      for (uint32_t q = 0; q < p.qps; ++q) all = all && res.done[q] >= done->iterations[q];
      if (all) break;
    }
    dog.idle(now);
  }
  return res;
}

std::optional<Mismatch> verify_write_target(const Resources& r, const Plan& p, const DoneMsg& d,
                                            uint64_t* bad) {
  std::optional<Mismatch> first;
  for (uint32_t q = 0; q < p.qps; ++q) {
    uint64_t n = d.iterations[q];
    for (uint32_t s = 0; s < p.slots && s < n; ++s) {
      uint64_t last = s + ((n - 1 - s) / p.slots) * p.slots;  // the last message written to slot s
      if (auto m = check_message({r.slot(q, s, p), p.size}, q, q, last)) {
        ++*bad;
        if (!first || m->iteration < first->iteration) first = m;
      }
    }
    if (first) break;
  }
  return first;
}

int run_server(Options o, Resources& r) {
  OobChannel oob = OobChannel::accept_one(o.port, 1e12);
  ParamsMsg pm{};
  oob.recv_all(&pm, sizeof pm, o.timeout_s);
  AcceptMsg acc{};
  acc.magic = kOobMagic;
  std::string refuse;
  if (pm.magic != kOobMagic || pm.version != kOobVersion) {
    refuse = "not a tandem-perf client (or another version)";
  } else if (pm.test != static_cast<uint8_t>(o.test)) {
    auto asked = static_cast<TestKind>(pm.test);
    refuse = "test mismatch: server runs " + std::string(test_name(o.test)) + ", client asked for " +
             (pm.test <= static_cast<uint8_t>(TestKind::kReadLat) ? std::string(test_name(asked)) : "?");
  } else {
    o.size = pm.size;
    o.iterations = pm.iterations;
    o.duration_s = pm.duration_s;
    o.qps = pm.qps;
    o.tx_depth = pm.tx_depth;
    o.mtu = pm.mtu;
    o.verify = pm.verify != 0;
    refuse = finalize_options(o);
    if (refuse.empty() && (pm.slots == 0 || pm.slots > 4 * o.tx_depth ||
                           pm.slots * o.size * o.qps > kMaxBufferBytes))
      refuse = "bad slot count";
  }
  if (!refuse.empty()) {
    std::snprintf(acc.error, sizeof acc.error, "%s", refuse.c_str());
    oob.send_all(&acc, sizeof acc);
    throw RunError("refused the client: " + refuse);
  }
  acc.ok = 1;
  oob.send_all(&acc, sizeof acc);
  Plan p = plan_from(o);
  p.slots = pm.slots;
  create_resources(r, p);
  uint8_t gid[16];
  local_gid(o, oob, gid);
  std::vector<QpDest> peer(p.qps), mine(p.qps);
  for (uint32_t q = 0; q < p.qps; ++q) mine[q] = local_dest(r, q, p, gid);
  oob.send_all(mine.data(), mine.size() * sizeof(QpDest));
  oob.recv_all(peer.data(), peer.size() * sizeof(QpDest), o.timeout_s);
  for (uint32_t q = 0; q < p.qps; ++q) {
    if (peer[q].magic != kOobMagic) throw RunError("bad QP details from the client");
    connect_qp(r.qps[q], r.psn[q], peer[q], p);
  }
  if (p.test == TestKind::kReadBw) {
    // READ sources: slot s of QP q holds pattern (q, s); message i reads slot i % slots.
    for (uint32_t q = 0; q < p.qps; ++q)
      for (uint32_t s = 0; s < p.slots; ++s) fill_pattern({r.slot(q, s, p), p.size}, q, s);
  }
  if (p.test == TestKind::kReadLat) fill_pattern({r.target(0, p), p.size}, kServerDirection, 0);
  if (p.test == TestKind::kSendBw)
    for (uint32_t q = 0; q < p.qps; ++q)
      for (uint32_t s = 0; s < p.slots; ++s) post_recv_slot(r, p, q, s);
  if (p.test == TestKind::kSendLat) post_recv_slot(r, p, 0, 0);
  SyncMsg sync{kOobMagic, 1};
  oob.send_all(&sync, sizeof sync);
  oob.recv_all(&sync, sizeof sync, o.timeout_s);

  RunReport rep;
  rep.options = o;
  rep.role = "server";
  if (!o.json) std::printf("%s", format_header(rep).c_str());
  print_addresses(o, p, mine, peer);
  ResultMsg res{};
  res.magic = kOobMagic;
  DoneMsg done{};
  try {
    if (p.test == TestKind::kReadLat) {
      // The client times its READs; this side only served them.
      done = wait_done(oob, r.ctx);
      if (done.failed) throw RunError("the client failed during the run");
      rep.iterations = rep.messages = done.iterations[0];
      std::optional<Mismatch> m;
      if (done.verify == 2)
        m = Mismatch{done.mm_qp, done.mm_iteration, done.mm_offset, static_cast<uint8_t>(done.mm_expected),
                     static_cast<uint8_t>(done.mm_got)};
      fill_report_verify(rep, p.verify, m, m ? 1 : 0);
    } else if (p.latency()) {
      uint64_t client_count = 0;
      LatResult lr = pingpong(r, p, oob, o, false, peer[0], &client_count);
      rep.have_latency = true;
      rep.latency = summarize_latency(lr.samples);
      rep.iterations = rep.messages = lr.iterations;
      if (client_count != lr.iterations)
        throw RunError("the client stopped after " + std::to_string(client_count) + " messages, " +
                       std::to_string(lr.iterations) + " arrived here");
      fill_report_verify(rep, p.verify, lr.mismatch, lr.bad_messages);
    } else {
      BwResult br;
      if (p.test == TestKind::kSendBw) {
        br = server_recv(r, p, oob, o, &done);
      } else {
        done = wait_done(oob, r.ctx);
        if (done.failed) throw RunError("the client failed during the run");
        if (p.verify && p.test == TestKind::kWriteBw)
          br.mismatch = verify_write_target(r, p, done, &br.bad_messages);
      }
      rep.have_bw = true;
      rep.bw_peak_gbps = done.bw_peak_gbps;  // the client measures (perftest's server prints none)
      rep.bw_avg_gbps = done.bw_avg_gbps;
      rep.msg_rate_mpps = done.msg_rate_mpps;
      for (uint32_t q = 0; q < p.qps; ++q) {
        rep.iterations = std::max(rep.iterations, done.iterations[q]);
        rep.messages += done.iterations[q];
      }
      if (p.test == TestKind::kReadBw) {
        // The client checks READ data: its verdict is the run's.
        if (done.verify == 2)
          br.mismatch = Mismatch{done.mm_qp, done.mm_iteration, done.mm_offset,
                                 static_cast<uint8_t>(done.mm_expected), static_cast<uint8_t>(done.mm_got)};
        fill_report_verify(rep, p.verify, br.mismatch, br.mismatch ? 1 : 0);
      } else {
        fill_report_verify(rep, p.verify, br.mismatch, br.mismatch ? br.bad_messages : 0);
      }
    }
  } catch (const RunError& e) {
    rep.error = e.what();
    res.error = 1;
    std::snprintf(res.text, sizeof res.text, "%s", e.what());
  }
  res.verify = rep.verify == "failed" ? 2 : rep.verify == "ok" ? 1 : 0;
  res.messages = rep.messages;
  if (rep.mismatch) {
    res.qp = rep.mismatch->qp;
    res.iteration = rep.mismatch->iteration;
    res.offset = rep.mismatch->offset;
    res.expected = rep.mismatch->expected;
    res.got = rep.mismatch->got;
    std::snprintf(res.text, sizeof res.text, "first mismatch at %s", format_mismatch(*rep.mismatch).c_str());
  }
  try {
    oob.send_all(&res, sizeof res);
  } catch (const std::exception& e) {
    if (rep.error.empty()) rep.error = e.what();
  }
  return finish(rep, o);
}

}  // namespace

int run(const Options& o) {
  struct stat st{};
  if (stat(o.device.c_str(), &st) != 0) {
    common::log::error("no RNIC worker at {} ({}); is tandem-rnic running?", o.device, std::strerror(errno));
    return 2;
  }
  if (!S_ISSOCK(st.st_mode)) {
    common::log::error("no RNIC worker at {} (not a socket)", o.device);
    return 2;
  }
  host::DeviceAttr attr;
  attr.name = "tandem-perf";
  attr.huge_buffers = o.huge;
  attr.timeout_ms = static_cast<int>(o.timeout_s * 1000);
  if (!o.gid.empty()) attr.vnic = o.gid.c_str();
  Resources r;
  r.ctx = host::open_device(o.device.c_str(), attr);
  if (r.ctx == nullptr) {
    common::log::error("cannot attach to the RNIC worker at {}: {}", o.device, host::last_error());
    return 2;
  }
  try {
    return o.is_server() ? run_server(o, r) : run_client(o, r);
  } catch (const std::exception& e) {
    if (o.json) {
      RunReport rep;
      rep.options = o;
      rep.role = o.is_server() ? "server" : "client";
            rep.error = e.what();
      rep.errors = 1;
      std::printf("%s\n", format_json(rep).c_str());
      std::fflush(stdout);
    }
    common::log::error("{}", e.what());
    return 1;
  }
}

}  // namespace tandem::rnic::perf
