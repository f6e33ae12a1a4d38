// The receive path of tandem-rnic for one RX burst, in passes over the whole
// burst (as l3fwd and VPP do): parse every frame's headers (prefetching
// frames ahead), then check the burst's ICRCs together (roce_icrc_burst
// interleaves four frames' CRC chains), then the ingress check frame by frame,
// then the hand-off of what passed to the transport core as one burst
// (Transport::on_packets), in arrival order. A SEND or WRITE with a payload of
// kDeferIcrcFrom bytes or more has only its headers' part of the ICRC
// computed here: the core goes on over the payload in the pass that places it
// (RxPacketRef::icrc_pending), so its bytes are read once, not twice
// (rnic/core/README.md "ICRC"). The worker, its unit tests (fake
// I/O) and the rx-pipeline benchmark all run this code; they differ in the
// ingress callback and in `Frames`, the I/O layer's buffer type and its
// accessors (rnic/dpdk/rx_stage.h: mbufs), all inline: no call per frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/trace/tracer.h"
#include "common/wire/drop_reason.h"
#include "common/wire/headers.h"
#include "common/wire/icrc.h"
#include "common/wire/roce_packet.h"
#include "rnic/core/transport.h"
#include "rnic/port/egress_route.h"
#include "rnic/port/worker_counters.h"
#include "rnic/table/level2_table.h"

namespace tandem::rnic::port {

// The tenant owns the QP: the packet must come from the underlay address of
// the QP's remote as the QP's egress entry (vNIC, remote overlay IP) maps it
// in this packet's table version. That entry is the agent's (or the YAML's)
// resolution of the pair, so a withdrawn or moved mapping refuses the next
// packet, and two vNIC pairs of one tenant between the same two ports are told
// apart by their QPs: the ingress entry (underlay source, VNI), which cannot
// tell them apart, is only the gate for packets that carry a VNI on the wire.
//
// `qp_of(wire_qpn)` gives the QP (a Q* with `routed`, `vni`, `pkey`), nullptr if
// unknown; `route_of(Q&)` its route in `snap` (egress_route.h), nullptr if
// the entry is gone. On kNone *out is the QP.
template <class Q, class QpOf, class RouteOf>
common::DropReason check_ingress(const common::RocePacket& pkt, uint32_t local_underlay, const Level2Table& table,
                                 const Level2Table::Snapshot& snap, QpOf&& qp_of, RouteOf&& route_of,
                                 Q** out) noexcept {
  using common::DropReason;
  const common::Ipv4Header& ip = pkt.has_outer ? pkt.outer.ip : pkt.ip;
  if (ip.dst != local_underlay) return DropReason::kTableMiss;
  // A VNI on the wire is checked before the QP is even looked up.
  if (pkt.has_outer && table.lookup(snap, common::ingress_key_vni(ip.src, pkt.outer.vxlan.vni)) == nullptr)
    return DropReason::kTenantMismatch;
  Q* q = qp_of(pkt.bth.dqpn);
  if (q == nullptr) return DropReason::kUnknownQpn;
  if (!q->routed) return DropReason::kBadQpState;
  // The sending RNIC stamped its QP's tenant's partition: another tenant's
  // packet aimed at this QPN is dropped here, never ACKed nor NAKed.
  if (pkt.bth.pkey != q->pkey) [[unlikely]] return DropReason::kPkeyViolation;
  if (pkt.has_outer && (pkt.outer.vxlan.vni & 0xFFFFFF) != q->vni) return DropReason::kTenantMismatch;
  const EgressRoute* r = route_of(*q);
  if (r == nullptr) return DropReason::kTableMiss;  // withdrawn
  if (ip.src != r->underlay) return DropReason::kTenantMismatch;
  *out = q;
  return DropReason::kNone;
}

// `Frames`: the I/O layer's frames. `Buf` its buffer type; static inline
// `data(Buf*)` (the first segment's bytes), `len(const Buf*)` (the whole
// frame), `segmented(const Buf*)`, `linearize(Buf*, len, scratch)` (the frame
// copied to scratch, returns where it is), `prefetch(const Buf*)`.
template <class Frames>
class RxStage {
 public:
  using Buf = typename Frames::Buf;

  static constexpr uint16_t kMaxBurst = 32;
  static constexpr uint16_t kPrefetchAhead = 3;
  static constexpr uint32_t kScratchBytes = 16384;  // largest multi-segment frame (copied to parse)
  // Payload bytes from which a SEND's, WRITE's or READ response's ICRC is finished by the
  // placement (below it the frame's CRC is one of four interleaved here, and
  // the copy is a few moves: nothing to gain).
  static constexpr uint32_t kDeferIcrcFrom = 256;

  RxStage() = default;
  // Off: every ICRC checked here, before placement (benchmarks' A/B).
  void set_fused_icrc(bool on) noexcept { fused_icrc_ = on; }
  RxStage(const RxStage&) = delete;
  RxStage& operator=(const RxStage&) = delete;

  // Runs frames m[0..n) (any n; in pieces of kMaxBurst) and leaves freeing
  // them to the caller (the core copied what it kept). Every frame is counted
  // in k: rx_packets/rx_bytes, then either rx_accepted or one drop (stage,
  // reason). `ingress(RocePacket&, uint8_t* frame[, bool& traced])` ->
  // DropReason is the tenant check; on kNone it has set pkt.bth.dqpn to the
  // core's QPN (and may rewrite the frame's remote addresses) and, if it takes
  // `traced`, set it to the QP's trace flag (trace_flags.h; without it every
  // accepted packet of a traced burst is matched against the rule). Returns
  // the frames the core took.
  template <class Ingress>
  uint32_t run(Buf* const* m, uint16_t n, Transport& core, WorkerCounters& k, uint64_t now,
               Ingress&& ingress) noexcept {
    uint32_t taken = 0;
    for (uint16_t at = 0; at < n; at += kMaxBurst) {
      const uint16_t b = static_cast<uint16_t>(n - at < kMaxBurst ? n - at : kMaxBurst);
      taken += chunk<false>(m + at, b, core, k, now, ingress, nullptr);
    }
    k.rx_accepted += taken;
    return taken;
  }
  // The same with tracing (common/trace): one test of `trace.active()` per
  // burst; only a burst under a rule runs the recording variant, whose
  // tenant-check and core records carry `table_version` (the snapshot the
  // check read). There an accepted packet costs the test of its QP's flag;
  // the rule itself is matched only for flagged packets and for the rare
  // ones refused before the core (no QP to hold a flag).
  template <class Ingress>
  uint32_t run(Buf* const* m, uint16_t n, Transport& core, WorkerCounters& k, uint64_t now, Ingress&& ingress,
               common::trace::Tracer& trace, uint64_t table_version = 0) noexcept {
    trace_aux_ = static_cast<uint32_t>(table_version);
    uint32_t taken = 0;
    for (uint16_t at = 0; at < n; at += kMaxBurst) {
      const uint16_t b = static_cast<uint16_t>(n - at < kMaxBurst ? n - at : kMaxBurst);
      taken += trace.active() ? chunk<true>(m + at, b, core, k, now, ingress, &trace)
                              : chunk<false>(m + at, b, core, k, now, ingress, nullptr);
    }
    k.rx_accepted += taken;
    return taken;
  }

  // Passes 1 and 2 over n <= kMaxBurst frames: headers (no ICRC), then the
  // ICRCs together. Returns how many passed; their slots are good_[0..ok).
  // Parse failures and bad ICRCs are counted (Stage::kParse) exactly as
  // parse_roce with its ICRC check would classify them, and each parsed
  // packet's icrc_checked/icrc_computed are set as parse_roce sets them.
  // (What any receiver that checks the ICRC must do: the rx-pipeline floor.)
  uint16_t validate(Buf* const* m, uint16_t n, WorkerCounters& k) noexcept {
    return validate<false, false>(m, n, k, nullptr, 0);
  }
  // kDefer (the pipeline): the ICRCs of large SEND/WRITE requests and READ responses are left
  // pending (pending_[j], their headers' CRC in icrc_[j], icrc_checked false)
  // for the placement to finish.
  template <bool kTrace, bool kDefer>
  uint16_t validate(Buf* const* m, uint16_t n, WorkerCounters& k, common::trace::Tracer* trace,
                    uint64_t now) noexcept {
    static constexpr common::ParseOptions kHeadersOnly{.check_icrc = false, .check_ip_checksum = true};
    for (uint16_t i = 0; i < n && i < kPrefetchAhead; ++i) Frames::prefetch(m[i]);
    k.rx_packets += n;
    uint16_t g = 0;
    for (uint16_t i = 0; i < n; ++i) {
      if (i + kPrefetchAhead < n) Frames::prefetch(m[i + kPrefetchAhead]);
      Buf* b = m[i];
      const uint32_t len = Frames::len(b);
      k.rx_bytes += len;
      uint8_t* data = Frames::data(b);
      if (Frames::segmented(b)) [[unlikely]] {
        // A frame larger than one mbuf (memif with a small bsize): parse a
        // copy, one scratch slot per frame still in this burst.
        if (len > kScratchBytes) {
          k.drop(Stage::kParse, common::DropReason::kTruncated);
          continue;
        }
        if (!scratch_ready()) [[unlikely]] {
          k.drop(Stage::kParse, common::DropReason::kNoBuffer);
          continue;
        }
        data = Frames::linearize(b, len, scratch_.data() + std::size_t{g} * kScratchBytes);
        ++k.rx_linearized;
      }
      common::RocePacket& pkt = pkt_[g];
      const common::DropReason r = common::parse_roce(data, len, pkt, kHeadersOnly);
      if (r != common::DropReason::kNone) [[unlikely]] {
        k.drop(Stage::kParse, r);
        continue;
      }
      data_[g] = data;
      // parse_roce's ICRC span: the RoCE IPv4 header up to the ICRC, the
      // IPv4 total length having been checked against the frame.
      icrc_at_[g] = data + pkt.ip_offset;
      icrc_len_[g] = std::size_t{pkt.ip.total_len} - common::kIcrcLen;
      if constexpr (kDefer) {
        // Only the headers here: the core continues over payload and pad.
        pending_[g] = fused_icrc_ && pkt.payload_len >= kDeferIcrcFrom &&
                      common::opcode_has(pkt.bth.opcode, common::kOpSend | common::kOpWrite | common::kOpReadResp) &&
                      !common::opcode_has(pkt.bth.opcode, common::kOpDeth);
        if (pending_[g]) icrc_len_[g] = pkt.payload_offset - pkt.ip_offset;
      }
      ++g;
    }
    common::roce_icrc_burst(icrc_at_, icrc_len_, icrc_, g);
    uint16_t ok = 0;
    for (uint16_t j = 0; j < g; ++j) {
      common::RocePacket& pkt = pkt_[j];
      if constexpr (kDefer) {
        if (pending_[j]) {
          good_[ok++] = static_cast<uint8_t>(j);
          continue;
        }
      }
      pkt.icrc_checked = true;
      pkt.icrc_computed = icrc_[j];
      if (icrc_[j] != pkt.icrc) [[unlikely]] {
        k.drop(Stage::kParse, common::DropReason::kBadIcrc);
        if constexpr (kTrace) trace_rx(*trace, pkt, pkt.bth.dqpn, common::trace::Stage::kRxParse,
                                       common::DropReason::kBadIcrc, now);
        continue;
      }
      good_[ok++] = static_cast<uint8_t>(j);
    }
    return ok;
  }

  // The packets validate() passed, in order (for tests).
  const common::RocePacket& packet(uint16_t i) const noexcept { return pkt_[good_[i]]; }

 private:
  // One burst of n <= kMaxBurst frames: passes 1-2 (validate), 3 (the tenant
  // check, in arrival order: it depends on nothing the core changes) and 4
  // (the core, the burst at once: one QP lookup per run of requests to one
  // QP). kTrace: packets the rule matches leave a record where they end.
  template <bool kTrace, class Ingress>
  uint32_t chunk(Buf* const* m, uint16_t b, Transport& core, WorkerCounters& k, uint64_t now, Ingress& ingress,
                 common::trace::Tracer* trace) noexcept {
    const uint16_t ok = validate<kTrace, true>(m, b, k, trace, now);
    uint16_t in = 0;
    [[maybe_unused]] bool any_traced = false;
    for (uint16_t i = 0; i < ok; ++i) {
      const uint16_t j = good_[i];
      common::RocePacket& pkt = pkt_[j];
      uint8_t* data = data_[j];
      [[maybe_unused]] const uint32_t wire_dqpn = pkt.bth.dqpn;  // ingress rewrites it to the core's
      bool traced = true;
      const RxPacketRef ref{&pkt, data + pkt.payload_offset, pkt.payload_len, pending_[j], icrc_[j]};
      const common::DropReason r = call_ingress(ingress, pkt, data, traced);
      if (r != common::DropReason::kNone) [[unlikely]] {
        if (r == common::DropReason::kConsumed) continue;  // a CM MAD, taken by the port
        // A pending ICRC is checked before the refusal is counted: a
        // corrupted frame is a bad ICRC, not the tenant or QP its bits name.
        if (ref.icrc_pending && !icrc_rest_ok(ref)) {
          k.drop(Stage::kParse, common::DropReason::kBadIcrc);
          if constexpr (kTrace) trace_rx(*trace, pkt, wire_dqpn, common::trace::Stage::kRxParse,
                                         common::DropReason::kBadIcrc, now);
          continue;
        }
        k.drop(Stage::kIngress, r);
        if constexpr (kTrace) trace_rx(*trace, pkt, wire_dqpn, common::trace::Stage::kRxIngress, r, now);
        continue;
      }
      if constexpr (kTrace) {
        wire_dqpn_[in] = wire_dqpn;
        traced_[in] = traced;
        any_traced |= traced;
      }
      refs_[in++] = ref;
    }
    const uint32_t took = core.on_packets(refs_, in, now, why_);
    // A bad ICRC the placement found is counted where the others are.
    if (took != in) [[unlikely]]
      for (uint16_t i = 0; i < in; ++i)
        if (why_[i] != common::DropReason::kNone)
          k.drop(why_[i] == common::DropReason::kBadIcrc ? Stage::kParse : Stage::kCore, why_[i]);
    if constexpr (kTrace)
      if (any_traced)
        for (uint16_t i = 0; i < in; ++i)
          if (traced_[i]) {
            const common::DropReason v = took == in ? common::DropReason::kNone : why_[i];
            trace_rx(*trace, *refs_[i].pkt, wire_dqpn_[i],
                     v == common::DropReason::kBadIcrc ? common::trace::Stage::kRxParse
                                                       : common::trace::Stage::kRxCore,
                     v, now);
          }
    return took;
  }

  template <class Ingress>
  static common::DropReason call_ingress(Ingress& ingress, common::RocePacket& pkt, uint8_t* data,
                                         bool& traced) noexcept {
    if constexpr (std::is_invocable_v<Ingress&, common::RocePacket&, uint8_t*, bool&>)
      return ingress(pkt, data, traced);
    else
      return ingress(pkt, data);
  }

  void trace_rx(common::trace::Tracer& t, const common::RocePacket& pkt, uint32_t wire_dqpn,
                common::trace::Stage stage, common::DropReason verdict, uint64_t now) const noexcept {
    const common::Ipv4Header& ip = pkt.has_outer ? pkt.outer.ip : pkt.ip;
    if (!t.matches(ip.src, ip.dst, wire_dqpn, pkt.bth.pkey)) return;
    common::trace::Record r;
    r.ts_ns = now;
    r.src_ip = ip.src;
    r.dst_ip = ip.dst;
    r.dqpn = wire_dqpn;
    r.psn = pkt.bth.psn;
    r.sport = pkt.has_outer ? pkt.outer.udp.sport : pkt.udp.sport;
    r.ip_id = ip.id;
    r.stage = stage;
    r.opcode = pkt.bth.opcode;
    r.verdict = static_cast<uint8_t>(verdict);
    if (stage != common::trace::Stage::kRxParse) r.aux = trace_aux_;
    t.record(r);
  }

  // The scratch area for multi-segment frames, allocated on the first one
  // (never in steady state; a failed allocation drops the frame).
  bool scratch_ready() noexcept {
    if (!scratch_.empty()) return true;
    try {
      scratch_.resize(std::size_t{kMaxBurst} * kScratchBytes);
    } catch (...) {
      return false;
    }
    return true;
  }

  common::RocePacket pkt_[kMaxBurst];
  uint8_t* data_[kMaxBurst];
  const uint8_t* icrc_at_[kMaxBurst];
  std::size_t icrc_len_[kMaxBurst];
  uint32_t icrc_[kMaxBurst];    // the ICRC, or a pending one's headers' CRC
  bool pending_[kMaxBurst] = {};  // ICRC left to the placement (validate<kDefer>)
  bool fused_icrc_ = true;
  uint8_t good_[kMaxBurst];
  RxPacketRef refs_[kMaxBurst];
  common::DropReason why_[kMaxBurst];
  uint32_t wire_dqpn_[kMaxBurst];
  bool traced_[kMaxBurst];  // traced bursts: the accepted packet's QP flag
  uint32_t trace_aux_ = 0;  // traced bursts: the table version their tenant check read
  std::vector<uint8_t> scratch_;
};

}  // namespace tandem::rnic::port
