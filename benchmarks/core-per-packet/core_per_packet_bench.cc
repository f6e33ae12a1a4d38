// Transport-core cost per packet: the send side (poll -> TxDesc, transport
// headers written and the payload gathered into a frame buffer, ACKs
// processed) and the receive side (on_packet: checks, reorder window,
// placement memcpy into registered memory, ACK generation), for RDMA WRITE
// packets of --payload bytes between two in-process Transports. Baseline,
// measured in the same run, harness and memory footprint: a bare memcpy of
// the payload plus writing the same transport headers, per packet and side.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/wire/icrc.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/frame.h"
#include "rnic/core/transport.h"

namespace {

using namespace tandem::rnic;
using Clock = std::chrono::steady_clock;

struct Result {
  double tx_ns = 0, rx_ns = 0;
  uint64_t pkts = 0;
};

double ns_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

struct Side {
  explicit Side(std::size_t mem_bytes) : t(TransportConfig{}), mem(mem_bytes, 1) {
    mr = t.reg_mr(mem.data(), mem.size(),
                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    cq = t.create_cq(1 << 12);
  }
  Transport t;
  std::vector<uint8_t> mem;
  MemoryRegion mr;
  uint32_t cq = 0;
  uint32_t qpn = 0;
};

void connect(Side& s, uint32_t remote, uint32_t mtu) {
  QpAttr a;
  a.state = QpState::kInit;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  s.t.modify_qp(s.qpn, a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
  a.state = QpState::kRtr;
  a.path_mtu = mtu;
  a.dest_qp_num = remote;
  a.rq_psn = 0xFFF000;  // the peer's sq_psn
  a.ack_every = 16;
  s.t.modify_qp(s.qpn, a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_AV);
  a.state = QpState::kRts;
  a.sq_psn = 0xFFF000;  // wraps during the run
  s.t.modify_qp(s.qpn, a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

struct Frame {
  tandem::common::RocePacket pkt;
  std::vector<uint8_t> bytes;
};

Result run_core(Reliability mode, uint32_t payload, uint64_t target_pkts, std::size_t mem) {
  Side a(mem), b(mem);
  QpInitAttr init;
  init.mode = mode;
  init.window_pkts = 1024;
  init.sq_depth = 64;
  init.policy.cc_window_bytes = 1ull << 30;
  a.qpn = a.t.create_qp(init);
  b.qpn = b.t.create_qp(init);
  connect(a, b.qpn, payload);
  connect(b, a.qpn, payload);

  const uint32_t msg = 64 * payload;  // 64 packets per WRITE
  uint64_t posted = 0, next_off = 0;
  std::vector<uint8_t> txbuf(16384);
  std::vector<Frame> frames(512);
  for (auto& f : frames) f.bytes.resize(payload + 256);
  // Descriptors stay valid in the TX ring until the core's next poll().
  std::vector<const TxDesc*> sent(512);
  Completion wc[64];
  Result r;
  while (r.pkts < target_pkts) {
    // --- send side (timed): post, poll, write headers + gather payload ---
    auto t0 = Clock::now();
    for (;;) {
      SendWr wr;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = 0;  // unsignaled, as a streaming sender would
      if (posted % 16 == 15) wr.send_flags = IBV_SEND_SIGNALED;
      wr.num_sge = 1;
      wr.sg_list[0] = Sge{a.mr.addr + next_off, msg, a.mr.lkey};
      wr.remote_addr = b.mr.addr + next_off;
      wr.rkey = b.mr.rkey;
      if (a.t.post_send(a.qpn, wr) != 0) break;
      ++posted;
      next_off = (next_off + msg) % (mem - msg);
    }
    a.t.poll(0);
    uint32_t n = 0;
    while (!a.t.tx().empty() && n < frames.size()) {
      const TxDesc& d = a.t.tx().front();
      std::size_t h = write_transport_headers(d, txbuf.data());
      for (uint32_t i = 0; i < d.num_segs; ++i) {
        std::memcpy(txbuf.data() + h, d.segs[i].data, d.segs[i].len);
        h += d.segs[i].len;
      }
      sent[n] = &d;  // turned into a frame for B below, untimed
      a.t.tx().pop();
      ++n;
    }
    r.tx_ns += ns_since(t0);
    // --- the wire (untimed): frames with ICRC, parsed as an RX path would ---
    for (uint32_t i = 0; i < n; ++i) {
      Frame& f = frames[i];
      f.bytes.resize(payload + 256);
      const std::size_t len = build_frame(*sent[i], FrameAddrs{}, f.bytes.data(), f.bytes.size());
      f.bytes.resize(len);
      tandem::common::parse_roce(f.bytes.data(), len, f.pkt);
    }
    // --- receive side (timed): on_packet, then poll for the ACKs ---
    t0 = Clock::now();
    for (uint32_t i = 0; i < n; ++i) {
      const Frame& f = frames[i];
      b.t.on_packet(f.pkt, f.bytes.data() + f.pkt.payload_offset, f.pkt.payload_len, 0);
    }
    b.t.poll(0);
    r.rx_ns += ns_since(t0);
    r.pkts += n;
    // --- ACKs back to the sender: timed as send-side work ---
    uint32_t k = 0;
    std::vector<Frame>& ackf = frames;  // reuse the frame buffers
    while (!b.t.tx().empty()) {
      const TxDesc& d = b.t.tx().front();
      Frame& f = ackf[k++ % ackf.size()];
      f.bytes.resize(256);
      const std::size_t len = build_frame(d, FrameAddrs{}, f.bytes.data(), f.bytes.size());
      f.bytes.resize(len);
      tandem::common::parse_roce(f.bytes.data(), len, f.pkt);
      b.t.tx().pop();
      t0 = Clock::now();
      a.t.on_packet(f.pkt, f.bytes.data() + f.pkt.payload_offset, f.pkt.payload_len, 0);
      r.tx_ns += ns_since(t0);
    }
    while (a.t.poll_cq(a.cq, wc, 64)) {}
    if (n == 0 && k == 0) {
      std::fprintf(stderr, "core-per-packet: stalled after %llu packets\n", (unsigned long long)r.pkts);
      const QpCounters* c = b.t.qp_counters(b.qpn);
      for (std::size_t i = 0; i < tandem::common::kDropReasonCount; ++i)
        if (c->drops[i]) std::fprintf(stderr, "  rx drop %s: %llu\n", std::string(tandem::common::drop_reason_name(static_cast<tandem::common::DropReason>(i))).c_str(), (unsigned long long)c->drops[i]);
      break;
    }
  }
  r.tx_ns /= static_cast<double>(r.pkts);
  r.rx_ns /= static_cast<double>(r.pkts);
  return r;
}

// The floor, in the same harness: per packet the send side writes the same
// transport headers and copies the payload from the sender's memory into a
// frame buffer; the frames get their ICRC (untimed, as the cores' frames
// do); the receive side copies the payload into the receiver's memory.
Result run_baseline(uint32_t payload, uint64_t target_pkts, std::size_t mem) {
  std::vector<uint8_t> src(mem, 1), dst(mem, 0);
  std::vector<std::vector<uint8_t>> frames(256, std::vector<uint8_t>(payload + 256));
  TxDesc d;
  d.bth.opcode = IBV_OPCODE_RC_RDMA_WRITE_MIDDLE;
  d.has_xeth = true;
  d.payload_len = payload;
  std::size_t off = 0, roff = 0;
  Result r;
  uint32_t psn = 0;
  while (r.pkts < target_pkts) {
    auto t0 = Clock::now();
    for (auto& f : frames) {
      d.bth.psn = psn++ & 0xFFFFFF;
      d.xeth.msg_offset = static_cast<uint32_t>(off);
      const std::size_t h = write_transport_headers(d, f.data());
      std::memcpy(f.data() + h, src.data() + off, payload);
      off += payload;
      if (off + payload > mem) off = 0;
    }
    r.tx_ns += ns_since(t0);
    for (auto& f : frames) {  // the wire: untimed
      const uint32_t crc = tandem::common::roce_icrc(f.data(), payload + 40);
      std::memcpy(f.data() + payload + 40, &crc, 4);
    }
    t0 = Clock::now();
    for (auto& f : frames) {
      std::memcpy(dst.data() + roff, f.data() + 40, payload);
      roff += payload;
      if (roff + payload > mem) roff = 0;
    }
    r.rx_ns += ns_since(t0);
    r.pkts += frames.size();
  }
  volatile uint8_t sink = dst[payload / 2];
  (void)sink;
  r.tx_ns /= static_cast<double>(r.pkts);
  r.rx_ns /= static_cast<double>(r.pkts);
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rnic/core per-packet cost"};
  bool json = false;
  uint32_t payload = 1024;
  uint64_t pkts = 1'000'000;
  int reps = 3;
  std::size_t mem_mb = 8;
  app.add_flag("--json", json, "print one JSON object");
  app.add_option("--payload", payload, "payload bytes per packet (= path MTU): 256-4096")
      ->check(CLI::IsMember({256, 512, 1024, 2048, 4096}));
  app.add_option("--pkts", pkts, "packets per measurement")->check(CLI::Range(10'000, 100'000'000));
  app.add_option("--reps", reps, "repetitions (median is reported)")->check(CLI::Range(1, 21));
  app.add_option("--mem-mb", mem_mb, "registered memory per side, MiB")->check(CLI::Range(1, 1024));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const std::size_t mem = mem_mb << 20;
  std::vector<double> irn_tx, irn_rx, gbn_tx, gbn_rx, base_tx, base_rx;
  for (int i = 0; i < reps; ++i) {
    const Result rb = run_baseline(payload, pkts, mem);
    const Result ri = run_core(Reliability::kIrn, payload, pkts, mem);
    const Result rg = run_core(Reliability::kGoBackN, payload, pkts, mem);
    base_tx.push_back(rb.tx_ns);
    base_rx.push_back(rb.rx_ns);
    irn_tx.push_back(ri.tx_ns);
    irn_rx.push_back(ri.rx_ns);
    gbn_tx.push_back(rg.tx_ns);
    gbn_rx.push_back(rg.rx_ns);
  }
  const double btx = median(base_tx), brx = median(base_rx);
  const double b = (btx + brx) / 2;  // one side's average, like ours
  const double tx = median(irn_tx), rx = median(irn_rx);
  const double gtx = median(gbn_tx), grx = median(gbn_rx);
  const double ours = (tx + rx) / 2;  // one side's average cost per packet
  const std::string bname = "memcpy " + std::to_string(payload) + " B + transport header write";
  if (json) {
    nlohmann::json j = {{"bench", "core-per-packet"}, {"unit", "ns/pkt"},
                        {"ours", ours}, {"baseline", b}, {"baseline_name", bname},
                        {"ratio", ours / b}, {"payload", payload}, {"pkts", pkts},
                        {"mem_mb", mem_mb},
                        {"irn_tx_ns", tx}, {"irn_rx_ns", rx},
                        {"gobackn_tx_ns", gtx}, {"gobackn_rx_ns", grx},
                        {"baseline_tx_ns", btx}, {"baseline_rx_ns", brx},
                        {"tx_ratio", tx / btx}, {"rx_ratio", rx / brx}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("core-per-packet: RDMA WRITE, %u B payload, %zu MiB per side, %llu packets x %d reps (median)\n",
              payload, mem_mb, static_cast<unsigned long long>(pkts), reps);
  std::printf("%-38s %12s %12s %12s\n", "ns/pkt", "send side", "receive side", "mean");
  auto row = [](const char* name, double t, double r) {
    std::printf("%-38s %12.1f %12.1f %12.1f\n", name, t, r, (t + r) / 2);
  };
  row(("baseline: " + bname).c_str(), btx, brx);
  row("ours: IRN", tx, rx);
  row("ours: go-back-N", gtx, grx);
  std::printf("%-38s %12.2f %12.2f %12.2f\n", "ratio IRN / baseline", tx / btx, rx / brx, ours / b);
  return 0;
}
