// The RTR and RTS attributes of a connected rdma_cm QP (rdma_init_qp_attr's,
// and rdma_accept/rdma_connect's own ibv_modify_qp), header-only so a unit
// test checks them against what the kernel's CM puts on the wire.
//
// rdma_cm's PSN rule (Linux drivers/infiniband/core/cma.c rdma_init_qp_attr,
// cm.c cm_req_handler/cm_rep_handler): the starting PSN a REQ or REP carries
// is the PSN its sender's QP *expects to receive* (RTR rq_psn = the ID's
// seq_num, which it announced); the side that gets the message *sends* from
// it (RTS sq_psn = the peer's starting PSN). Tandem must do the same or a
// kernel peer NAKs every packet with a PSN sequence error.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>

#include "rnic/cm/cm_protocol.h"

namespace tandem::rnic::rdmacm {

struct ConnQp {
  uint32_t announced_psn = 0;  // ours, in our REQ/REP
  cm::CmParams remote{};       // the peer's REQ/REP (psn: its announced one)
  uint32_t remote_ip = 0;      // host order: the GID is ::ffff:ip
  uint8_t responder_resources = 1;
  uint8_t initiator_depth = 1;
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t ack_timeout = 14;  // RDMA_OPTION_ID_ACK_TIMEOUT's, else 14 (4.096 us x 2^14 = 67 ms)
};

inline void conn_rtr_attr(const ConnQp& c, ibv_qp_attr* a, int* mask) {
  *a = ibv_qp_attr{};
  a->qp_state = IBV_QPS_RTR;
  a->path_mtu = static_cast<ibv_mtu>(c.remote.path_mtu ? c.remote.path_mtu : uint8_t{IBV_MTU_1024});
  a->dest_qp_num = c.remote.qpn;
  a->rq_psn = c.announced_psn & 0xFFFFFF;  // what we told the peer to send from
  a->max_dest_rd_atomic = c.responder_resources ? c.responder_resources : 1;
  a->min_rnr_timer = 12;
  a->ah_attr.is_global = 1;
  a->ah_attr.grh.dgid.raw[10] = a->ah_attr.grh.dgid.raw[11] = 0xFF;
  const uint8_t ip[4] = {static_cast<uint8_t>(c.remote_ip >> 24), static_cast<uint8_t>(c.remote_ip >> 16),
                         static_cast<uint8_t>(c.remote_ip >> 8), static_cast<uint8_t>(c.remote_ip)};
  std::memcpy(a->ah_attr.grh.dgid.raw + 12, ip, 4);
  a->ah_attr.grh.hop_limit = 64;
  a->ah_attr.grh.sgid_index = 0;
  a->ah_attr.port_num = 1;
  *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
          IBV_QP_MIN_RNR_TIMER;
}

inline void conn_rts_attr(const ConnQp& c, ibv_qp_attr* a, int* mask) {
  *a = ibv_qp_attr{};
  a->qp_state = IBV_QPS_RTS;
  a->sq_psn = c.remote.psn & 0xFFFFFF;  // what the peer told us to send from
  a->timeout = c.ack_timeout;
  a->retry_cnt = c.retry_count;
  a->rnr_retry = c.rnr_retry_count;
  a->max_rd_atomic = c.initiator_depth ? c.initiator_depth : 1;
  *mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
          IBV_QP_MAX_QP_RD_ATOMIC;
}

}  // namespace tandem::rnic::rdmacm
