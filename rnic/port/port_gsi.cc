// PortLogic's QP1 (the GSI QP) for the connection manager (rnic/cm): an
// arriving CM MAD is gated (our underlay, the VNI, the GSI Q_Key, a whole
// MAD), a REQ's vNIC and the route back to its sender are looked up in the
// table, and the MAD is copied onto the CM's ring: one copy, no system call.
// The CM's MADs come back the other way and leave as UD SEND_ONLY frames to
// QP1, from the vNIC's route (or straight back to a MAD's sender, for a REJ
// to a REQ that names no connection). The CM itself runs on a control thread.
#include <cstring>

#include "rnic/cm/gsi_ring.h"
#include "rnic/port/port_logic.h"

namespace tandem::rnic::port {

common::DropReason PortLogic::accept_gsi(const common::RocePacket& pkt, const uint8_t* data,
                                         const Level2Table::Snapshot& snap) noexcept {
  using common::DropReason;
  const common::Ipv4Header& ip = pkt.has_outer ? pkt.outer.ip : pkt.ip;
  if (ip.dst != c_.underlay_ip) return DropReason::kTableMiss;
  if (pkt.has_outer && table_.lookup(snap, common::ingress_key_vni(ip.src, pkt.outer.vxlan.vni)) == nullptr)
    return DropReason::kTenantMismatch;
  if (gsi_ == nullptr) return DropReason::kUnknownQpn;  // no connection manager on this port
  if (pkt.bth.opcode != IBV_OPCODE_UD_SEND_ONLY) return DropReason::kInvalidRequest;
  if (pkt.deth.qkey != cm::kGsiQkey) return DropReason::kBadQkey;
  if (pkt.payload_len < cm::kMadLen) return DropReason::kTruncated;
  cm::GsiIn& in = gsi_in_;
  in.kind = cm::GsiIn::kMad;
  in.pkey = pkt.bth.pkey;
  in.has_vni = pkt.has_outer;
  in.vni = pkt.has_outer ? pkt.outer.vxlan.vni : 0;
  in.src_underlay = ip.src;
  std::memcpy(in.src_mac, (pkt.has_outer ? pkt.outer.eth.src : pkt.eth.src).data(), 6);
  in.src_qp = pkt.deth.src_qp;
  in.req_vnic = 0;
  in.req_route_underlay = 0;
  const uint8_t* mad = data + pkt.payload_offset;
  std::memcpy(in.mad, mad, cm::kMadLen);
  const uint16_t attr = common::load_be16(mad + 16);
  if (mad[1] == cm::kMgmtClassCm &&
      (attr == static_cast<uint16_t>(cm::Attr::kReq) || attr == static_cast<uint16_t>(cm::Attr::kSidrReq))) {
    // Which vNIC the request is for, and where that vNIC's route to the
    // requester goes: the CM checks the MAD came from there (the tenant check
    // an RC packet gets from its QP's route).
    uint32_t local = 0, remote = 0;
    if (attr == static_cast<uint16_t>(cm::Attr::kReq)) {
      cm::Gid g;
      std::memcpy(g.data(), mad + cm::kMadHdrLen + 72, 16);
      local = cm::ipv4_of_gid(g);
      std::memcpy(g.data(), mad + cm::kMadHdrLen + 56, 16);
      remote = cm::ipv4_of_gid(g);
    } else {  // SIDR_REQ names no GIDs: the rdma_cm header in its private data does
      cm::CmaHdr h;
      if (cm::read_cma_hdr(mad + cm::kMadHdrLen + 16, h)) {
        local = h.dst_ip;
        remote = h.src_ip;
      }
    }
    const Vnic* v = nullptr;
    for (const Vnic& x : vnics_)
      if (x.overlay_ip == local && (v == nullptr || common::wire_pkey(x.pkey) == pkt.bth.pkey)) v = &x;
    if (v != nullptr) {
      in.req_vnic = v->id + 1;
      const Level2Entry* e = table_.lookup(snap, common::egress_key(v->id, remote));
      if (e != nullptr) in.req_route_underlay = e->egress.underlay_dst_ip;
    }
  }
  if (!gsi_->in.push(in)) {
    gsi_->rx_ring_full.fetch_add(1, std::memory_order_relaxed);
    return DropReason::kNoBuffer;
  }
  gsi_->rx_mads.fetch_add(1, std::memory_order_relaxed);
  return DropReason::kConsumed;
}

// One record of the CM's ring: a probe is answered at once; a MAD gets its
// descriptor and template (false: nothing to send, counted).
bool PortLogic::gsi_frame(const cm::GsiOut& o, const Level2Table::Snapshot& snap, TxDesc& d,
                          const EncapTemplate** t) noexcept {
  if (o.kind == cm::GsiOut::kProbe) {
    cm::GsiIn& a = gsi_in_;
    a.kind = cm::GsiIn::kRoute;
    a.probe = o.probe;
    const Level2Entry* e = table_.lookup(snap, common::egress_key(o.vnic_id, o.remote_ip));
    if (e == nullptr && agent_) agent_->punt(common::egress_key(o.vnic_id, o.remote_ip), now_);
    a.route_underlay = e ? e->egress.underlay_dst_ip : 0;
    if (!gsi_->in.push(a)) gsi_->rx_ring_full.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (o.kind == cm::GsiOut::kReply) {
    EncapAddrs a;
    a.src_mac = c_.underlay_mac;
    std::memcpy(a.dst_mac.data(), o.dst_mac, 6);
    a.src_ip = c_.underlay_ip;
    a.dst_ip = o.dst_underlay;
    a.pkey = o.pkey;
    gsi_route_.tmpl = make_encap_template(a, o.dqpn);
    gsi_route_.invalidate();
  } else {
    const Level2Entry* e = table_.lookup(snap, common::egress_key(o.vnic_id, o.remote_ip));
    if (e == nullptr) {
      if (agent_) agent_->punt(common::egress_key(o.vnic_id, o.remote_ip), now_);
      gsi_->tx_no_route.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    gsi_route_.resolve(e->egress, c_.underlay_mac, c_.path_sets, snap.version, o.remote_ip, o.pkey);
  }
  *t = &gsi_route_.tmpl_for(o.dqpn);
  d = TxDesc{};
  d.bth.opcode = IBV_OPCODE_UD_SEND_ONLY;
  d.bth.dqpn = o.dqpn;
  d.bth.psn = gsi_psn_++ & 0xFFFFFF;
  d.bth.pkey = o.pkey;
  d.remote_qpn = o.dqpn;
  d.deth.qkey = cm::kGsiQkey;
  d.deth.src_qp = cm::kGsiQpn;
  d.payload_len = cm::kMadLen;
  d.num_segs = 1;
  d.segs[0] = TxSeg{o.mad, cm::kMadLen};  // key 0: in no region, so the I/O layer copies it (the slot is reused at once)
  d.udp_sport = common::kEntropyPortBase;
  return true;
}

}  // namespace tandem::rnic::port
