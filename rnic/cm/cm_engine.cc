#include "rnic/cm/cm_engine.h"

#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tandem::rnic::cm {

namespace {

// IBA's time unit: 4.096 us * 2^x.
constexpr uint64_t iba_ns(uint8_t x) noexcept { return x >= 31 ? (uint64_t{4096} << 31) : (uint64_t{4096} << x); }
constexpr uint32_t kRdmaCmPortMin = 32768;

void put_private(CmMsg& m, const uint8_t* p, uint32_t len, uint32_t at = 0) noexcept {
  const uint32_t cap = private_capacity(m.hdr.attr);
  if (at >= cap) return;
  const uint32_t n = std::min(len, cap - at);
  if (n) std::memcpy(m.priv.data() + at, p, n);
  m.priv_len = std::max(m.priv_len, at + n);
}

}  // namespace

const char* conn_state_name(ConnState s) noexcept {
  switch (s) {
    case ConnState::kReqSent: return "REQ_SENT";
    case ConnState::kReqRcvd: return "REQ_RCVD";
    case ConnState::kRepSent: return "REP_SENT";
    case ConnState::kRepRcvd: return "REP_RCVD";
    case ConnState::kEstablished: return "ESTABLISHED";
    case ConnState::kDreqSent: return "DREQ_SENT";
    case ConnState::kTimewait: return "TIMEWAIT";
    case ConnState::kSidrReqSent: return "SIDR_REQ_SENT";
    case ConnState::kSidrReqRcvd: return "SIDR_REQ_RCVD";
  }
  return "?";
}

// ------------------------------------------------------------------ helpers

const CmVnic* CmEngine::vnic_by_id(uint32_t id) const noexcept {
  for (const CmVnic& v : vnics_)
    if (v.id == id) return &v;
  return nullptr;
}

const CmVnic* CmEngine::vnic_by_ip(uint32_t ip) const noexcept {
  for (const CmVnic& v : vnics_)
    if (v.ip == ip) return &v;
  return nullptr;
}

bool CmEngine::client_may_use(uint32_t client, const CmVnic& v) const noexcept {
  const auto it = clients_.find(client);
  return it != clients_.end() && (it->second == 0 || it->second == v.ip);
}

CmEngine::Conn* CmEngine::conn(uint32_t id) noexcept {
  const auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second;
}

CmEngine::Conn* CmEngine::owned(uint32_t client, uint32_t id) noexcept {
  Conn* c = conn(id);
  return (c && c->client == client) ? c : nullptr;
}

bool CmEngine::state_of(uint32_t id, ConnState* s) const noexcept {
  const auto it = conns_.find(id);
  if (it == conns_.end()) return false;
  *s = it->second.st;
  return true;
}

uint32_t CmEngine::new_id() noexcept {
  for (;;) {
    const uint32_t id = next_id_++;
    if (id != 0 && !conns_.count(id) && !listeners_.count(id)) return id;
  }
}

uint16_t CmEngine::pick_port() noexcept {
  next_port_ = static_cast<uint16_t>(next_port_ + 1);
  return static_cast<uint16_t>(kRdmaCmPortMin + (next_port_ & 0x7FFF));
}

CmMsg CmEngine::msg(Attr a, const Conn& c) const noexcept {
  CmMsg m;
  m.hdr.attr = a;
  m.hdr.tid = c.tid;
  m.local_comm_id = c.id;
  m.remote_comm_id = c.remote_id;
  return m;
}

void CmEngine::send(const Conn& c, const CmMsg& m) {
  GsiOut o;
  o.kind = GsiOut::kMad;
  o.vnic_id = c.vnic_id;
  o.pkey = c.pkey;
  o.remote_ip = c.remote_ip;
  encode_mad(m, o.mad);
  mads_.push_back(o);
  ++k_.mads_out;
}

void CmEngine::send_reply(const MadSource& src, const CmMsg& m) {
  GsiOut o;
  o.kind = GsiOut::kReply;
  o.dst_underlay = src.underlay;
  std::memcpy(o.dst_mac, src.mac, 6);
  o.pkey = src.pkey;
  encode_mad(m, o.mad);
  mads_.push_back(o);
  ++k_.mads_out;
}

void CmEngine::arm(Conn& c, uint64_t now, uint64_t timeout_ns, uint32_t retries) {
  c.has_timer = true;
  c.timeout_ns = timeout_ns;
  c.deadline = now + timeout_ns;
  c.retries_left = retries;
}

void CmEngine::event(const Conn& c, uint32_t type, int32_t status, const uint8_t* priv, uint32_t priv_len) {
  Event e;
  e.client = c.client;
  e.channel = c.channel;
  CmEventMsg& m = e.msg;
  m.event = type;
  m.status = status;
  m.id = c.id;
  m.listen_id = c.listen_id;
  m.cookie = c.cookie;
  m.local_ip = c.local_ip;
  m.remote_ip = c.remote_ip;
  m.local_port = c.local_port;
  m.remote_port = c.remote_port;
  m.params = c.remote;
  if (priv && priv_len) {
    m.private_len = std::min(priv_len, kCmPrivateMax);
    std::memcpy(m.private_data, priv, m.private_len);
  }
  events_.push_back(e);
}

void CmEngine::enter_timewait(Conn& c, uint64_t now) {
  c.st = ConnState::kTimewait;
  c.has_timer = true;
  c.deadline = now + c_.timewait_ns;
  c.retries_left = 0;
  c.mra_at = 0;
}

void CmEngine::send_rej(Conn& c, RejReason why, MsgKind kind, const uint8_t* priv, uint32_t len) {
  CmMsg m = msg(Attr::kRej, c);
  m.reason = why;
  m.msg = kind;
  put_private(m, priv, len);
  send(c, m);
  ++k_.rejected_sent;
}

void CmEngine::send_dreq(Conn& c, uint64_t now) {
  CmMsg m = msg(Attr::kDreq, c);
  m.hdr.tid = c.tid = new_tid();
  m.qpn = c.remote.qpn;
  encode_mad(m, c.last);
  send(c, m);
  c.st = ConnState::kDreqSent;
  arm(c, now, iba_ns(c.peer_timeout) * 2, c_.max_retries);
}

bool CmEngine::from_peer(const Conn& c, const MadSource& src) const noexcept {
  return src.pkey == c.pkey && (c.remote_underlay == 0 || c.remote_underlay == src.underlay);
}

// ----------------------------------------------------------------- commands

int CmEngine::resolve(uint32_t client, const CmRequest& r, uint64_t now) {
  (void)now;
  Probe p;
  p.client = client;
  p.channel = r.channel;
  p.cookie = r.cookie;
  p.remote_ip = r.remote_ip;
  for (const CmVnic& v : vnics_)
    if (client_may_use(client, v) && (r.local_ip == 0 || r.local_ip == v.ip)) p.vnics.push_back(v.id);
  if (p.vnics.empty()) return r.local_ip ? EADDRNOTAVAIL : ENODEV;
  const uint32_t id = next_probe_++;
  next_probe(id, probes_[id] = std::move(p));
  return 0;
}

// Asks the lcore whether the next candidate vNIC has a route to the address.
void CmEngine::next_probe(uint32_t probe_id, Probe& p) {
  GsiOut o;
  o.kind = GsiOut::kProbe;
  o.probe = probe_id;
  o.vnic_id = p.vnics.front();
  o.remote_ip = p.remote_ip;
  mads_.push_back(o);
}

void CmEngine::on_route(uint32_t probe_id, uint32_t route_underlay) {
  const auto it = probes_.find(probe_id);
  if (it == probes_.end()) return;
  Probe& p = it->second;
  const CmVnic* v = vnic_by_id(p.vnics.front());
  Event e;
  e.client = p.client;
  e.channel = p.channel;
  e.msg.cookie = p.cookie;
  e.msg.remote_ip = p.remote_ip;
  if (route_underlay != 0 && v != nullptr) {
    e.msg.event = RDMA_CM_EVENT_ADDR_RESOLVED;
    e.msg.local_ip = v->ip;
    e.msg.params.path_mtu = c_.path_mtu;
  } else {
    p.vnics.erase(p.vnics.begin());
    if (!p.vnics.empty()) {
      next_probe(probe_id, p);
      return;
    }
    e.msg.event = RDMA_CM_EVENT_ADDR_ERROR;
    e.msg.status = -EHOSTUNREACH;  // no route from the tenant's vNIC(s)
  }
  events_.push_back(e);
  probes_.erase(it);
}

int CmEngine::listen(uint32_t client, const CmRequest& r, uint32_t* id, uint16_t* port) {
  if (r.local_ip != 0) {
    const CmVnic* v = vnic_by_ip(r.local_ip);
    if (v == nullptr) return EADDRNOTAVAIL;
    if (!client_may_use(client, *v)) return EACCES;
  }
  uint16_t p = r.local_port;
  if (p == 0) p = pick_port();
  const uint64_t sid = service_id(r.ps, p);
  for (const auto& [lid, l] : listeners_)
    if (l.service_id == sid && (l.vnic_ip == 0 || r.local_ip == 0 || l.vnic_ip == r.local_ip)) return EADDRINUSE;
  Listener l;
  l.id = new_id();
  l.client = client;
  l.channel = r.channel;
  l.cookie = r.cookie;
  l.vnic_ip = r.local_ip;
  l.service_id = sid;
  listeners_[l.id] = l;
  *id = l.id;
  *port = p;
  return 0;
}

int CmEngine::connect(uint32_t client, const CmRequest& r, uint64_t now, uint32_t* id, uint16_t* port) {
  const CmVnic* v = vnic_by_ip(r.local_ip);
  if (v == nullptr) return EADDRNOTAVAIL;
  if (!client_may_use(client, *v)) return EACCES;
  if (r.private_len > kCmPrivateMax) return EINVAL;
  const bool ud = r.qp_type == 4 /* IBV_QPT_UD */;
  const uint32_t room = (ud ? kSidrReqPrivate : kReqPrivate) - kCmaHdrLen;
  if (r.private_len > room) return EINVAL;
  Conn c;
  c.id = new_id();
  c.tid = new_tid();
  c.client = client;
  c.channel = r.channel;
  c.cookie = r.cookie;
  c.active = true;
  c.vnic_id = v->id;
  c.pkey = v->pkey;
  c.local_ip = v->ip;
  c.remote_ip = r.remote_ip;
  c.local_port = r.local_port ? r.local_port : pick_port();
  c.remote_port = r.remote_port;
  c.service_id = service_id(r.ps, r.remote_port);
  c.qp_type = r.qp_type;
  c.local = r.params;
  uint8_t hdr[kCmaHdrLen];
  write_cma_hdr(CmaHdr{c.local_ip, c.remote_ip, c.local_port}, hdr);
  CmMsg m;
  m.hdr.tid = c.tid;
  if (ud) {
    m.hdr.attr = Attr::kSidrReq;
    m.local_comm_id = c.id;  // request ID
    m.pkey = c.pkey;
    m.service_id = c.service_id;
    c.st = ConnState::kSidrReqSent;
  } else {
    m.hdr.attr = Attr::kReq;
    m.local_comm_id = c.id;
    m.service_id = c.service_id;
    m.ca_guid = v->guid;
    m.qpn = r.params.qpn;
    m.responder_resources = r.params.responder_resources;
    m.initiator_depth = r.params.initiator_depth;
    m.remote_cm_timeout = c_.response_timeout;
    m.transport = 0;
    m.flow_control = r.params.flow_control;
    m.starting_psn = r.params.psn & 0xFFFFFF;
    m.local_cm_timeout = c_.response_timeout;
    m.retry_count = r.params.retry_count & 7;
    m.pkey = c.pkey;
    m.path_mtu = c_.path_mtu;
    m.rnr_retry_count = r.params.rnr_retry_count & 7;
    m.max_cm_retries = c_.max_retries & 0xF;
    m.srq = r.params.srq;
    m.local_gid = gid_of_ipv4(c.local_ip);
    m.remote_gid = gid_of_ipv4(c.remote_ip);
    m.hop_limit = 64;
    m.local_ack_timeout = 14;
    c.st = ConnState::kReqSent;
  }
  put_private(m, hdr, kCmaHdrLen);
  put_private(m, r.private_data, r.private_len, kCmaHdrLen);
  encode_mad(m, c.last);
  send(c, m);
  arm(c, now, iba_ns(c_.response_timeout) * 2, c_.max_retries);
  *id = c.id;
  *port = c.local_port;
  conns_[c.id] = c;
  return 0;
}

int CmEngine::accept(uint32_t client, const CmRequest& r, uint64_t now) {
  Conn* c = owned(client, r.id);
  if (c == nullptr) return ENOENT;
  if (r.private_len > kCmPrivateMax) return EINVAL;
  c->cookie = r.cookie ? r.cookie : c->cookie;
  c->local = r.params;
  if (c->st == ConnState::kSidrReqRcvd) {
    CmMsg m = msg(Attr::kSidrRep, *c);
    m.local_comm_id = c->remote_id;  // the request ID
    m.sidr_status = static_cast<uint8_t>(SidrStatus::kSuccess);
    m.qpn = r.params.qpn;
    m.qkey = r.params.qkey;
    m.service_id = c->service_id;
    put_private(m, r.private_data, r.private_len);
    send(*c, m);
    conns_.erase(c->id);
    return 0;
  }
  if (c->st != ConnState::kReqRcvd) return EINVAL;
  CmMsg m = msg(Attr::kRep, *c);
  m.qpn = r.params.qpn;
  m.starting_psn = r.params.psn & 0xFFFFFF;
  m.responder_resources = r.params.responder_resources;
  m.initiator_depth = r.params.initiator_depth;
  m.target_ack_delay = 0;
  m.flow_control = r.params.flow_control;
  m.rnr_retry_count = r.params.rnr_retry_count & 7;
  m.srq = r.params.srq;
  const CmVnic* v = vnic_by_id(c->vnic_id);
  m.ca_guid = v ? v->guid : 0;
  put_private(m, r.private_data, r.private_len);
  encode_mad(m, c->last);
  send(*c, m);
  c->st = ConnState::kRepSent;
  c->mra_at = 0;
  arm(*c, now, iba_ns(c->peer_timeout) * 2, c->peer_retries);
  return 0;
}

int CmEngine::reject(uint32_t client, const CmRequest& r, uint64_t now) {
  Conn* c = owned(client, r.id);
  if (c == nullptr) return ENOENT;
  if (c->st == ConnState::kSidrReqRcvd) {
    CmMsg m = msg(Attr::kSidrRep, *c);
    m.local_comm_id = c->remote_id;
    m.sidr_status = static_cast<uint8_t>(SidrStatus::kRejected);
    m.service_id = c->service_id;
    put_private(m, r.private_data, r.private_len);
    send(*c, m);
    conns_.erase(c->id);
    return 0;
  }
  if (c->st != ConnState::kReqRcvd && c->st != ConnState::kRepRcvd) return EINVAL;
  send_rej(*c, RejReason::kConsumerDefined, c->st == ConnState::kReqRcvd ? MsgKind::kReq : MsgKind::kRep,
           r.private_data, r.private_len);
  enter_timewait(*c, now);
  return 0;
}

int CmEngine::establish(uint32_t client, const CmRequest& r, uint64_t now) {
  (void)now;
  Conn* c = owned(client, r.id);
  if (c == nullptr) return ENOENT;
  if (c->st != ConnState::kRepRcvd) return EINVAL;
  CmMsg m = msg(Attr::kRtu, *c);
  put_private(m, r.private_data, r.private_len);
  encode_mad(m, c->last);  // resent if the peer's REP comes again (our RTU was lost)
  send(*c, m);
  c->st = ConnState::kEstablished;
  c->has_timer = false;
  ++k_.established;
  event(*c, RDMA_CM_EVENT_ESTABLISHED, 0);
  return 0;
}

int CmEngine::disconnect(uint32_t client, const CmRequest& r, uint64_t now) {
  Conn* c = owned(client, r.id);
  if (c == nullptr) return ENOENT;
  switch (c->st) {
    case ConnState::kEstablished:
      send_dreq(*c, now);
      return 0;
    case ConnState::kRepSent:  // no RTU yet: the kernel sends DREQ too
      send_dreq(*c, now);
      return 0;
    case ConnState::kDreqSent:
    case ConnState::kTimewait:
      return 0;  // already going (a DREQ received was answered at once)
    default:
      return EINVAL;
  }
}

int CmEngine::destroy(uint32_t client, const CmRequest& r, uint64_t now) {
  const auto l = listeners_.find(r.id);
  if (l != listeners_.end()) {
    if (l->second.client != client) return ENOENT;
    listeners_.erase(l);
    return 0;
  }
  Conn* c = owned(client, r.id);
  if (c == nullptr) return ENOENT;
  switch (c->st) {
    case ConnState::kReqSent:
    case ConnState::kRepRcvd:
      send_rej(*c, RejReason::kTimeout, c->st == ConnState::kReqSent ? MsgKind::kOther : MsgKind::kRep, nullptr, 0);
      break;
    case ConnState::kReqRcvd:
      send_rej(*c, RejReason::kConsumerDefined, MsgKind::kReq, nullptr, 0);
      break;
    case ConnState::kRepSent:
    case ConnState::kEstablished:
      send_dreq(*c, now);  // unanswered DREQs end in timewait on their own
      c->client = 0;       // nobody to tell
      return 0;
    case ConnState::kDreqSent:
      c->client = 0;
      return 0;
    case ConnState::kTimewait:
      c->client = 0;
      return 0;
    case ConnState::kSidrReqSent:
    case ConnState::kSidrReqRcvd:
      conns_.erase(c->id);
      return 0;
  }
  c->client = 0;
  enter_timewait(*c, now);
  return 0;
}

void CmEngine::remove_client(uint32_t client, uint64_t now) {
  for (auto it = listeners_.begin(); it != listeners_.end();)
    it = it->second.client == client ? listeners_.erase(it) : std::next(it);
  std::vector<uint32_t> mine;
  for (const auto& [id, c] : conns_)
    if (c.client == client) mine.push_back(id);
  CmRequest r;
  for (uint32_t id : mine) {
    r.id = id;
    destroy(client, r, now);
  }
  for (auto it = probes_.begin(); it != probes_.end();)
    it = it->second.client == client ? probes_.erase(it) : std::next(it);
  clients_.erase(client);
}

// --------------------------------------------------------------- MADs in

void CmEngine::on_mad(const MadSource& src, const uint8_t* mad, uint64_t now) {
  ++k_.mads_in;
  CmMsg m;
  if (decode_mad(mad, kMadLen, m) != MadError::kNone) {
    ++k_.bad_mads;
    return;
  }
  cur_src_ = &src;
  switch (m.hdr.attr) {
    case Attr::kReq: on_req(src, m, now); break;
    case Attr::kRep: on_rep(src, m, now); break;
    case Attr::kRtu: {
      Conn* c = conn(m.remote_comm_id);
      if (c == nullptr || !from_peer(*c, src)) ++k_.unsolicited;
      else on_rtu(m);
      break;
    }
    case Attr::kRej: {
      Conn* c = conn(m.remote_comm_id);
      if (c == nullptr || !from_peer(*c, src)) ++k_.unsolicited;
      else on_rej(m, now);
      break;
    }
    case Attr::kMra: {
      Conn* c = conn(m.remote_comm_id);
      if (c == nullptr || !from_peer(*c, src)) ++k_.unsolicited;
      else on_mra(m, now);
      break;
    }
    case Attr::kDreq: on_dreq(src, m, now); break;
    case Attr::kDrep: {
      Conn* c = conn(m.remote_comm_id);
      if (c == nullptr || !from_peer(*c, src)) ++k_.unsolicited;
      else on_drep(m, now);
      break;
    }
    case Attr::kSidrReq: on_sidr_req(src, m, now); break;
    case Attr::kSidrRep: {
      Conn* c = conn(m.local_comm_id);
      if (c == nullptr || !from_peer(*c, src)) ++k_.unsolicited;
      else on_sidr_rep(m);
      break;
    }
    default:
      ++k_.bad_mads;
      break;
  }
  cur_src_ = nullptr;
}

void CmEngine::on_req(const MadSource& src, const CmMsg& m, uint64_t now) {
  // A REQ this side already holds (the sender resent it): answer as the state says.
  for (auto& [id, c] : conns_) {
    if (c.active || c.remote_id != m.local_comm_id || c.remote_guid != m.ca_guid || c.remote_underlay != src.underlay)
      continue;
    ++k_.duplicates;
    if (c.st == ConnState::kReqRcvd && c.mra_at == 0) {  // MRA sent already: again
      CmMsg a = msg(Attr::kMra, c);
      a.msg = MsgKind::kReq;
      a.service_timeout = c_.mra_timeout;
      send(c, a);
    } else if (c.st == ConnState::kTimewait) {
      CmMsg r = msg(Attr::kRej, c);
      r.reason = RejReason::kStaleConn;
      send(c, r);
      ++k_.stale;
    }
    return;
  }
  CmMsg rej;
  rej.hdr.attr = Attr::kRej;
  rej.hdr.tid = m.hdr.tid;
  rej.remote_comm_id = m.local_comm_id;
  rej.msg = MsgKind::kReq;
  const CmVnic* v = src.req_vnic ? vnic_by_id(src.req_vnic - 1) : nullptr;
  if (v == nullptr) {  // no vNIC of this port has that address
    ++k_.no_vnic;
    rej.reason = RejReason::kInvalidGid;
    send_reply(src, rej);
    ++k_.rejected_sent;
    return;
  }
  // The tenant check: the REQ carries the partition its RNIC stamped, and must
  // come from where this vNIC's route to the sender's address goes. Another
  // tenant sees the same answer as a port nobody listens on.
  if (src.pkey != v->pkey || (src.has_vni && (src.vni & 0xFFFFFF) != v->vni) || src.req_route_underlay == 0 ||
      src.req_route_underlay != src.underlay || m.pkey != v->pkey) {
    ++k_.tenant_refused;
    rej.reason = RejReason::kInvalidServiceId;
    send_reply(src, rej);
    ++k_.rejected_sent;
    return;
  }
  if (m.transport != 0) {
    rej.reason = RejReason::kInvalidTransportType;
    send_reply(src, rej);
    ++k_.rejected_sent;
    return;
  }
  const Listener* l = nullptr;
  for (const auto& [lid, x] : listeners_)
    if (x.service_id == m.service_id && (x.vnic_ip == v->ip || (x.vnic_ip == 0 && client_may_use(x.client, *v)))) {
      l = &x;
      break;
    }
  if (l == nullptr) {
    ++k_.no_listener;
    rej.reason = RejReason::kInvalidServiceId;
    send_reply(src, rej);
    ++k_.rejected_sent;
    return;
  }
  CmaHdr h;
  const bool cma = is_rdma_cm_service(m.service_id);
  if (cma && !read_cma_hdr(m.priv.data(), h)) {
    ++k_.bad_mads;
    rej.reason = RejReason::kConsumerDefined;
    send_reply(src, rej);
    ++k_.rejected_sent;
    return;
  }
  Conn c;
  c.id = new_id();
  c.remote_id = m.local_comm_id;
  c.tid = m.hdr.tid;
  c.client = l->client;
  c.channel = l->channel;
  c.cookie = 0;
  c.listen_id = l->id;
  c.active = false;
  c.st = ConnState::kReqRcvd;
  c.vnic_id = v->id;
  c.pkey = v->pkey;
  c.local_ip = v->ip;
  c.remote_ip = ipv4_of_gid(m.local_gid);
  c.local_port = service_port(m.service_id);
  c.remote_port = cma ? h.src_port : 0;
  c.service_id = m.service_id;
  c.remote_guid = m.ca_guid;
  c.remote_underlay = src.underlay;
  c.qp_type = 2;  // IBV_QPT_RC
  c.remote.qpn = m.qpn;
  c.remote.psn = m.starting_psn;
  // As rdma_cm hands them to the passive side: its initiator depth is the
  // peer's responder resources and the other way round.
  c.remote.responder_resources = m.initiator_depth;
  c.remote.initiator_depth = m.responder_resources;
  c.remote.flow_control = m.flow_control;
  c.remote.retry_count = m.retry_count;
  c.remote.rnr_retry_count = m.rnr_retry_count;
  c.remote.srq = m.srq;
  c.remote.path_mtu = std::min(m.path_mtu, c_.path_mtu);
  c.peer_timeout = m.local_cm_timeout;
  c.peer_retries = m.max_cm_retries;
  // The REQ's sender waits remote_cm_timeout for us: an application slower
  // than that gets an MRA sent for it (as the kernel's cma does).
  c.mra_at = now + std::min<uint64_t>(c_.mra_after_ns, iba_ns(m.remote_cm_timeout) / 2);
  c.has_timer = false;
  const uint32_t off = cma ? kCmaHdrLen : 0;
  conns_[c.id] = c;
  c.cookie = l->cookie;  // the event names the listener; the connection's cookie comes with accept
  event(c, RDMA_CM_EVENT_CONNECT_REQUEST, 0, m.priv.data() + off, kReqPrivate - off);
}

void CmEngine::on_rep(const MadSource& src, const CmMsg& m, uint64_t now) {
  (void)now;
  Conn* c = conn(m.remote_comm_id);
  if (c == nullptr || !c->active || !from_peer(*c, src)) {
    ++k_.unsolicited;
    return;
  }
  if (c->st == ConnState::kEstablished && c->remote_id == m.local_comm_id) {  // our RTU was lost
    ++k_.duplicates;
    GsiOut o;
    o.kind = GsiOut::kMad;
    o.vnic_id = c->vnic_id;
    o.pkey = c->pkey;
    o.remote_ip = c->remote_ip;
    std::memcpy(o.mad, c->last, kMadLen);
    mads_.push_back(o);
    ++k_.mads_out;
    return;
  }
  if (c->st == ConnState::kRepRcvd) {
    ++k_.duplicates;
    return;
  }
  if (c->st != ConnState::kReqSent) {
    ++k_.unsolicited;
    return;
  }
  c->remote_id = m.local_comm_id;
  c->remote_guid = m.ca_guid;
  c->remote_underlay = src.underlay;
  c->remote.qpn = m.qpn;
  c->remote.psn = m.starting_psn;
  c->remote.responder_resources = m.initiator_depth;
  c->remote.initiator_depth = m.responder_resources;
  c->remote.flow_control = m.flow_control;
  c->remote.rnr_retry_count = m.rnr_retry_count;
  c->remote.srq = m.srq;
  c->remote.path_mtu = c_.path_mtu;
  c->remote.retry_count = c->local.retry_count;
  c->st = ConnState::kRepRcvd;
  c->has_timer = false;  // the application answers (establish, or reject); its death sends REJ
  event(*c, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, m.priv.data(), kRepPrivate);
}

void CmEngine::on_rtu(const CmMsg& m) {
  Conn* c = conn(m.remote_comm_id);
  if (c->st != ConnState::kRepSent || c->remote_id != m.local_comm_id) {
    ++(c->st == ConnState::kEstablished ? k_.duplicates : k_.unsolicited);
    return;
  }
  c->st = ConnState::kEstablished;
  c->has_timer = false;
  ++k_.established;
  event(*c, RDMA_CM_EVENT_ESTABLISHED, 0, m.priv.data(), kRtuPrivate);
}

void CmEngine::on_rej(const CmMsg& m, uint64_t now) {
  Conn* c = conn(m.remote_comm_id);
  ++k_.rejected_rcvd;
  switch (c->st) {
    case ConnState::kReqSent:
    case ConnState::kReqRcvd:
    case ConnState::kRepSent:
    case ConnState::kRepRcvd:
      break;
    default:
      ++k_.unsolicited;
      return;
  }
  // As the kernel's cma: REJECTED with the reason as status (a timeout REJ is UNREACHABLE... no: REJECTED too).
  if (c->client) event(*c, RDMA_CM_EVENT_REJECTED, static_cast<int32_t>(m.reason), m.priv.data(), kRejPrivate);
  enter_timewait(*c, now);
}

void CmEngine::on_mra(const CmMsg& m, uint64_t now) {
  Conn* c = conn(m.remote_comm_id);
  const bool ok = (c->st == ConnState::kReqSent && m.msg == MsgKind::kReq) ||
                  (c->st == ConnState::kRepSent && m.msg == MsgKind::kRep);
  if (!ok) {
    ++k_.unsolicited;
    return;
  }
  // The peer needs longer: wait its service timeout before resending (IBA 12.6.6).
  c->deadline = now + iba_ns(m.service_timeout) + c->timeout_ns;
}

void CmEngine::on_dreq(const MadSource& src, const CmMsg& m, uint64_t now) {
  Conn* c = conn(m.remote_comm_id);
  CmMsg rep;
  rep.hdr.attr = Attr::kDrep;
  rep.hdr.tid = m.hdr.tid;
  if (c == nullptr || !from_peer(*c, src) || c->remote_id != m.local_comm_id) {
    // The kernel answers a DREQ it cannot match with a DREP (cm_issue_drep): the peer stops resending.
    ++k_.unsolicited;
    rep.local_comm_id = m.remote_comm_id;
    rep.remote_comm_id = m.local_comm_id;
    send_reply(src, rep);
    return;
  }
  rep.local_comm_id = c->id;
  rep.remote_comm_id = c->remote_id;
  switch (c->st) {
    case ConnState::kEstablished:
    case ConnState::kRepSent:  // our RTU wait ends: the peer is leaving
    case ConnState::kDreqSent: // both sides closing at once
      send(*c, rep);
      ++k_.disconnects;
      if (c->client) event(*c, RDMA_CM_EVENT_DISCONNECTED, 0, m.priv.data(), kDreqPrivate);
      enter_timewait(*c, now);
      return;
    case ConnState::kTimewait:
      ++k_.duplicates;
      send(*c, rep);  // our DREP was lost
      return;
    default:
      ++k_.unsolicited;
      return;
  }
}

void CmEngine::on_drep(const CmMsg& m, uint64_t now) {
  Conn* c = conn(m.remote_comm_id);
  if (c->st != ConnState::kDreqSent) {
    ++(c->st == ConnState::kTimewait ? k_.duplicates : k_.unsolicited);
    return;
  }
  ++k_.disconnects;
  if (c->client) event(*c, RDMA_CM_EVENT_DISCONNECTED, 0, m.priv.data(), kDrepPrivate);
  enter_timewait(*c, now);
}

void CmEngine::on_sidr_req(const MadSource& src, const CmMsg& m, uint64_t now) {
  (void)now;
  CmMsg rep;
  rep.hdr.attr = Attr::kSidrRep;
  rep.hdr.tid = m.hdr.tid;
  rep.local_comm_id = m.local_comm_id;
  rep.service_id = m.service_id;
  const CmVnic* v = src.req_vnic ? vnic_by_id(src.req_vnic - 1) : nullptr;
  const Listener* l = nullptr;
  if (v != nullptr && src.pkey == v->pkey && src.req_route_underlay == src.underlay && src.underlay != 0) {
    for (const auto& [lid, x] : listeners_)
      if (x.service_id == m.service_id && (x.vnic_ip == v->ip || (x.vnic_ip == 0 && client_may_use(x.client, *v)))) {
        l = &x;
        break;
      }
  } else {
    ++(v == nullptr ? k_.no_vnic : k_.tenant_refused);
  }
  CmaHdr h;
  if (l == nullptr || !read_cma_hdr(m.priv.data(), h) || h.dst_ip != v->ip) {
    if (l == nullptr && v != nullptr) ++k_.no_listener;
    rep.sidr_status = static_cast<uint8_t>(SidrStatus::kNoMatch);
    send_reply(src, rep);
    return;
  }
  Conn c;
  c.id = new_id();
  c.remote_id = m.local_comm_id;
  c.tid = m.hdr.tid;
  c.client = l->client;
  c.channel = l->channel;
  c.listen_id = l->id;
  c.st = ConnState::kSidrReqRcvd;
  c.vnic_id = v->id;
  c.pkey = v->pkey;
  c.local_ip = v->ip;
  c.remote_ip = h.src_ip;
  c.local_port = service_port(m.service_id);
  c.remote_port = h.src_port;
  c.service_id = m.service_id;
  c.remote_underlay = src.underlay;
  c.qp_type = 4;
  conns_[c.id] = c;
  c.cookie = l->cookie;
  event(c, RDMA_CM_EVENT_CONNECT_REQUEST, 0, m.priv.data() + kCmaHdrLen, kSidrReqPrivate - kCmaHdrLen);
}

void CmEngine::on_sidr_rep(const CmMsg& m) {
  Conn* c = conn(m.local_comm_id);
  if (c->st != ConnState::kSidrReqSent) {
    ++k_.unsolicited;
    return;
  }
  if (m.sidr_status == static_cast<uint8_t>(SidrStatus::kSuccess)) {
    c->remote.qpn = m.qpn;
    c->remote.qkey = m.qkey;
    event(*c, RDMA_CM_EVENT_ESTABLISHED, 0, m.priv.data(), kSidrRepPrivate);
  } else {
    ++k_.rejected_rcvd;
    event(*c, m.sidr_status == static_cast<uint8_t>(SidrStatus::kRejected) ? RDMA_CM_EVENT_REJECTED
                                                                            : RDMA_CM_EVENT_UNREACHABLE,
          m.sidr_status == static_cast<uint8_t>(SidrStatus::kRejected) ? 28 : -ECONNREFUSED, m.priv.data(),
          kSidrRepPrivate);
  }
  conns_.erase(c->id);
}

// ------------------------------------------------------------------ timers

uint64_t CmEngine::tick(uint64_t now) {
  uint64_t next = UINT64_MAX;
  std::vector<uint32_t> gone;
  for (auto& [id, c] : conns_) {
    if (c.mra_at && now >= c.mra_at && c.st == ConnState::kReqRcvd) {
      c.mra_at = 0;
      CmMsg a = msg(Attr::kMra, c);
      a.msg = MsgKind::kReq;
      a.service_timeout = c_.mra_timeout;
      send(c, a);
    }
    if (c.mra_at && c.st == ConnState::kReqRcvd) next = std::min(next, c.mra_at);
    if (!c.has_timer) continue;
    if (now >= c.deadline) {
      if (c.st == ConnState::kTimewait) {
        gone.push_back(id);
        continue;
      }
      on_timeout(c, now);
    }
    if (c.has_timer) next = std::min(next, c.deadline);
  }
  for (uint32_t id : gone) conns_.erase(id);
  return next;
}

void CmEngine::on_timeout(Conn& c, uint64_t now) {
  if (c.retries_left > 0) {  // resend what waits for an answer (IBA 12.6: the same MAD, same TID)
    --c.retries_left;
    ++k_.retries;
    GsiOut o;
    o.kind = GsiOut::kMad;
    o.vnic_id = c.vnic_id;
    o.pkey = c.pkey;
    o.remote_ip = c.remote_ip;
    std::memcpy(o.mad, c.last, kMadLen);
    mads_.push_back(o);
    ++k_.mads_out;
    c.deadline = now + c.timeout_ns;
    return;
  }
  ++k_.timeouts;
  switch (c.st) {
    case ConnState::kReqSent:  // nobody answered: the REJ tells a peer that did get it
    case ConnState::kRepSent:  // the RTU never came: a half-open connection
      send_rej(c, RejReason::kTimeout, c.st == ConnState::kReqSent ? MsgKind::kOther : MsgKind::kRep, nullptr, 0);
      if (c.client) event(c, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      enter_timewait(c, now);
      return;
    case ConnState::kSidrReqSent:
      if (c.client) event(c, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      enter_timewait(c, now);
      return;
    case ConnState::kDreqSent:  // no DREP: disconnected all the same
      if (c.client) event(c, RDMA_CM_EVENT_DISCONNECTED, 0);
      enter_timewait(c, now);
      return;
    default:
      c.has_timer = false;
      return;
  }
}

}  // namespace tandem::rnic::cm
