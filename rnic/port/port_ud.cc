// PortLogic's UD QPs: bound to their application's vNIC at RTR (no peer: each
// WQE names its destination, whose egress entry from that vNIC the transmit
// path resolves per datagram, so a tenant reaches only its own routes), and
// the tenant check of an arriving datagram.
#include <cerrno>

#include "rnic/port/port_logic.h"

namespace tandem::rnic::port {

int PortLogic::apply_ud_rtr(QpCtx& q, const host::QpInfo& info) {
  const Vnic* vnic = nullptr;
  for (const Vnic& v : vnics_)
    if (info.vnic_ip == 0 || v.overlay_ip == info.vnic_ip) {
      vnic = &v;  // unbound: the first vNIC (one trust domain)
      break;
    }
  if (vnic == nullptr) return ENOENT;
  q.vnic = vnic->id;
  q.vni = vnic->vni;
  q.pkey = common::wire_pkey(vnic->pkey);
  q.local_overlay = vnic->overlay_ip;
  q.remote_overlay = 0;
  q.dest_qpn = 0;
  q.route.invalidate();
  q.mtu = c_.mtu;  // a UD QP's messages are one packet of at most the port's MTU
  QpAttr a;
  a.state = QpState::kRtr;
  a.path_mtu = q.mtu;
  const int rc = core_.modify_qp(q.core_qpn, a, IBV_QP_STATE | IBV_QP_PATH_MTU);
  if (rc == 0) q.routed = true;
  return rc;
}

// As check_ingress (rx_stage.h) for a datagram: the QP must be a UD QP of
// this port, and the packet must carry the partition its vNIC's tenant has
// (stamped by the sending RNIC, never by an application): another tenant's
// datagram is a counted pkey_violation. The GRH the core writes gets overlay
// addresses: the QP's vNIC, and the sender's (below; the underlay address is
// not the tenant's).
common::DropReason PortLogic::accept_ud(common::RocePacket& pkt, const Level2Table::Snapshot& snap) noexcept {
  using common::DropReason;
  const common::Ipv4Header& ip = pkt.has_outer ? pkt.outer.ip : pkt.ip;
  if (ip.dst != c_.underlay_ip) return DropReason::kTableMiss;
  if (pkt.has_outer && table_.lookup(snap, common::ingress_key_vni(ip.src, pkt.outer.vxlan.vni)) == nullptr)
    return DropReason::kTenantMismatch;
  QpCtx* q = by_host(pkt.bth.dqpn);
  if (q == nullptr) return DropReason::kUnknownQpn;
  if (!q->ud) return DropReason::kInvalidRequest;
  if (!q->routed) return DropReason::kBadQpState;
  if (pkt.bth.pkey != q->pkey) return DropReason::kPkeyViolation;
  if (pkt.has_outer && (pkt.outer.vxlan.vni & 0xFFFFFF) != q->vni) return DropReason::kTenantMismatch;
  // The sender's overlay address: the peer this QP last sent to if it is that
  // underlay, else the tenant's ingress entry for the underlay (what it maps
  // arrivals from there to); 0.0.0.0 when the table has neither.
  const EgressRoute& r = q->route;
  uint32_t src = 0;
  if (r.version == snap.version && r.underlay == ip.src) {
    src = r.peer;
  } else if (const Level2Entry* e = table_.lookup(snap, common::ingress_key_vni(ip.src, q->vni));
             e != nullptr && e->ingress.local_vnic_id == q->vnic) {
    src = e->ingress.overlay_src_ip;
  }
  pkt.ip.src = src;
  pkt.ip.dst = q->local_overlay;
  pkt.bth.dqpn = q->core_qpn;
  return DropReason::kNone;
}

}  // namespace tandem::rnic::port
