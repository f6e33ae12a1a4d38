// rdma_cm's PSNs against a Linux peer: the QP attributes the drop-in librdmacm
// gives a connected QP (rnic/verbs/rdmacm_qp_attr.h) from what the CM engine
// exchanged with a kernel CM, whose REQ/REP bytes are written here at IBA's
// offsets (the kernel's ibta_vol1_c12.h) and whose QP PSNs follow its cm.c and
// cma.c: the REQ's/REP's starting PSN is its sender's rq_psn (cma's seq_num),
// and the side that receives it sends from it (cm_req_handler/cm_rep_handler
// set sq_psn to it). Each side's sq_psn must be the other's rq_psn, or rxe
// NAKs every packet (PSN sequence error): issue 35, rping against rxe.
#include <catch2/catch.hpp>

#include <rdma/rdma_cma.h>

#include <cstring>

#include "common/wire/byte_order.h"
#include "rnic/cm/cm_engine.h"
#include "rnic/verbs/rdmacm_qp_attr.h"

using namespace tandem::rnic::cm;
using tandem::common::load_be32;
using tandem::common::store_be16;
using tandem::common::store_be32;
using tandem::common::store_be64;
using tandem::rnic::rdmacm::conn_rtr_attr;
using tandem::rnic::rdmacm::conn_rts_attr;
using tandem::rnic::rdmacm::ConnQp;

namespace {

constexpr uint32_t kIpT = 0x0A630001, kIpL = 0x0A630002;  // Tandem's vNIC, the Linux host
constexpr uint32_t kUnderL = 0x0A630002;
constexpr uint16_t kPort = 7174;
constexpr uint32_t H = 24;  // the MAD header before the CM message

uint32_t be24_at(const uint8_t* p) { return load_be32(p) >> 8; }
void put24_at(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
}

void mad_header(uint8_t* m, uint16_t attr, uint64_t tid) {
  std::memset(m, 0, kMadLen);
  m[0] = 1;     // base version
  m[1] = 0x07;  // CM class
  m[2] = 2;     // class version
  m[3] = 0x03;  // Send
  store_be64(m + 8, tid);
  store_be16(m + 16, attr);
}

// A REQ as the kernel's cm_format_req lays it out (IBA 12.6.5), with cma's IP header.
void linux_req(uint8_t* m, uint32_t comm_id, uint32_t qpn, uint32_t starting_psn) {
  mad_header(m, 0x0010, 0x1234);
  uint8_t* b = m + H;
  store_be32(b + 0, comm_id);
  store_be64(b + 8, service_id(kPsTcp, kPort));
  store_be64(b + 16, 0x5254000000990002ULL);  // CA GUID
  put24_at(b + 32, qpn);
  b[35] = 1;  // responder resources
  b[39] = 1;  // initiator depth
  b[43] = static_cast<uint8_t>(20 << 3);       // remote CM response timeout, RC, no flow control
  put24_at(b + 44, starting_psn);
  b[47] = static_cast<uint8_t>(20 << 3 | 7);   // local CM response timeout, retry count
  store_be16(b + 48, 0xFFFF);
  b[50] = static_cast<uint8_t>(3 << 4 | 7);    // MTU 1024, RNR retry 7
  b[51] = static_cast<uint8_t>(15 << 4);       // max CM retries
  const Gid gl = gid_of_ipv4(kIpL), gt = gid_of_ipv4(kIpT);
  std::memcpy(b + 56, gl.data(), 16);
  std::memcpy(b + 72, gt.data(), 16);
  b[93] = 64;
  uint8_t* priv = b + 140;  // cma_hdr: version 0, IPv4, source port, addresses
  priv[1] = 4 << 4;
  store_be16(priv + 2, 40000);
  store_be32(priv + 16, kIpL);
  store_be32(priv + 32, kIpT);
}

// A REP as the kernel's cm_format_rep lays it out (IBA 12.6.8).
void linux_rep(uint8_t* m, uint64_t tid, uint32_t comm_id, uint32_t remote_comm_id, uint32_t qpn,
               uint32_t starting_psn) {
  mad_header(m, 0x0013, tid);
  uint8_t* b = m + H;
  store_be32(b + 0, comm_id);
  store_be32(b + 4, remote_comm_id);
  put24_at(b + 12, qpn);
  put24_at(b + 20, starting_psn);
  b[24] = 1;
  b[25] = 1;
  b[27] = 7 << 5;
  store_be64(b + 28, 0x5254000000990002ULL);
}

CmEngine tandem_engine() {
  CmEngine e;
  e.set_vnics({CmVnic{1, kIpT, 0xFFFF, 100, 0x0200000000000001ULL}});
  e.add_client(1, 0);
  return e;
}

MadSource from_linux() {
  MadSource s;
  s.underlay = kUnderL;
  s.pkey = 0xFFFF;
  s.req_vnic = 1 + 1;
  s.req_route_underlay = kUnderL;
  return s;
}

// The MAD with attribute `attr` the engine queued.
const uint8_t* queued(CmEngine& e, uint16_t attr) {
  for (const GsiOut& o : e.mads_out())
    if (o.kind != GsiOut::kProbe && tandem::common::load_be16(o.mad + 16) == attr) return o.mad;
  return nullptr;
}

}  // namespace

TEST_CASE("Linux connects to a Tandem listener: Tandem sends from the REQ's PSN and expects its REP's") {
  CmEngine t = tandem_engine();
  CmRequest l;
  l.local_ip = kIpT;
  l.local_port = kPort;
  l.ps = kPsTcp;
  uint32_t lid;
  uint16_t lport;
  REQUIRE(t.listen(1, l, &lid, &lport) == 0);

  // Linux active: its ID's seq_num goes into the REQ and becomes its rq_psn (rdma_init_qp_attr, RTR).
  const uint32_t linux_seq = 0x123456;
  uint8_t req[kMadLen];
  linux_req(req, 0x77, 0x11, linux_seq);
  t.on_mad(from_linux(), req, 0);
  REQUIRE(t.events_out().size() == 1);
  const CmEventMsg ev = t.events_out()[0].msg;
  REQUIRE(ev.event == RDMA_CM_EVENT_CONNECT_REQUEST);

  // rdma_accept: Tandem announces its PSN in the REP.
  const uint32_t ours = 0x654321;
  CmRequest acc;
  acc.id = ev.id;
  acc.params.qpn = 0x22;
  acc.params.psn = ours;
  REQUIRE(t.accept(1, acc, 0) == 0);
  const uint8_t* rep = queued(t, 0x0013);
  REQUIRE(rep != nullptr);
  // Linux active on the REP (cm_rep_handler): sq_psn = the REP's starting PSN.
  const uint32_t linux_sq_psn = be24_at(rep + H + 20), linux_rq_psn = linux_seq;

  ConnQp c;
  c.announced_psn = ours;
  c.remote = ev.params;
  c.remote_ip = kIpL;
  ibv_qp_attr rtr, rts;
  int m1 = 0, m2 = 0;
  conn_rtr_attr(c, &rtr, &m1);
  conn_rts_attr(c, &rts, &m2);
  CHECK((m1 & IBV_QP_RQ_PSN) != 0);
  CHECK((m2 & IBV_QP_SQ_PSN) != 0);
  CHECK(rts.sq_psn == linux_rq_psn);  // what Linux's QP expects first
  CHECK(rtr.rq_psn == linux_sq_psn);  // what Linux's QP sends first
  CHECK(rtr.dest_qp_num == 0x11);
  CHECK(rts.timeout == 14);  // rdma_set_option(ACK_TIMEOUT) not called
  c.ack_timeout = 21;
  conn_rts_attr(c, &rts, &m2);
  CHECK(rts.timeout == 21);
}

TEST_CASE("Tandem connects to a Linux listener: Tandem sends from the REP's PSN and expects its REQ's") {
  CmEngine t = tandem_engine();
  const uint32_t ours = 0x0ABCDE;
  CmRequest r;
  r.local_ip = kIpT;
  r.remote_ip = kIpL;
  r.remote_port = kPort;
  r.ps = kPsTcp;
  r.qp_type = 2;
  r.params.qpn = 0x22;
  r.params.psn = ours;
  uint32_t id;
  uint16_t port;
  REQUIRE(t.connect(1, r, 0, &id, &port) == 0);
  const uint8_t* req = queued(t, 0x0010);
  REQUIRE(req != nullptr);
  // Linux passive (cm_req_handler): sq_psn = the REQ's starting PSN; its rq_psn is its own
  // seq_num (rdma_init_qp_attr, RTR), which its REP announces (cma_accept_ib / ucma).
  const uint32_t linux_sq_psn = be24_at(req + H + 44), linux_seq = 0x13579B;
  const uint32_t tandem_comm = load_be32(req + H);
  const uint64_t tid = tandem::common::load_be64(req + 8);
  t.mads_out().clear();

  uint8_t rep[kMadLen];
  linux_rep(rep, tid, 0x99, tandem_comm, 0x11, linux_seq);
  MadSource s = from_linux();
  s.req_vnic = 0;
  t.on_mad(s, rep, 1000);
  REQUIRE(t.events_out().size() == 1);
  const CmEventMsg ev = t.events_out()[0].msg;
  REQUIRE(ev.event == RDMA_CM_EVENT_CONNECT_RESPONSE);

  ConnQp c;
  c.announced_psn = ours;
  c.remote = ev.params;
  c.remote_ip = kIpL;
  ibv_qp_attr rtr, rts;
  int m1 = 0, m2 = 0;
  conn_rtr_attr(c, &rtr, &m1);
  conn_rts_attr(c, &rts, &m2);
  CHECK(rts.sq_psn == linux_seq);      // Linux's rq_psn
  CHECK(rtr.rq_psn == linux_sq_psn);   // Linux sends from our REQ's PSN
  CHECK(rtr.dest_qp_num == 0x11);
}
