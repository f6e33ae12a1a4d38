// The socket between the drop-in librdmacm (rnic/verbs/rdmacm_*.cc) and the
// worker's connection manager (cm_service.h): SOCK_SEQPACKET on the worker's
// host socket path + ".cm", fixed-size messages, host byte order (both ends
// on one machine). An application opens one command connection per worker
// (CmOp::kHello; request/reply, one outstanding) and one event connection per
// event channel (CmOp::kChannel with the hello's client id and token), on
// which the worker only pushes CmEventMsg: so an event channel's fd is readable
// exactly when an event is waiting, as the kernel's rdma_cm fd is.
#pragma once

#include <cstdint>

namespace tandem::rnic::cm {

inline constexpr uint32_t kCmMagic = 0x54434d31;  // "TCM1"
inline constexpr uint32_t kCmPrivateMax = 224;    // the most a CM message carries (RTU, DREP)

enum class CmOp : uint16_t {
  kHello = 1,   // vnic_ip: the vNIC bound (0: any); reply: client id, token
  kChannel,     // on a new connection: client id, token, channel -> event connection
  kResolve,     // cookie, local_ip (0: any vNIC), remote_ip -> event ADDR_RESOLVED / ADDR_ERROR
  kListen,      // cookie, channel, local_ip (0: all the client's vNICs), local_port (0: pick), ps -> reply id, port
  kConnect,     // cookie, channel, local_ip, remote_ip, remote_port, ps, qp_type, qpn, psn, params, private data
  kAccept,      // id (comm id), cookie, qpn, psn, params, private data -> REP (RC) / SIDR_REP (UD)
  kReject,      // id, private data -> REJ (consumer defined) / SIDR_REP rejected
  kEstablish,   // id: the active side's QP is in RTS -> RTU, ESTABLISHED
  kDisconnect,  // id -> DREQ (or DREP to a DREQ received)
  kDestroy,     // id: a listener, or a connection (DREQ or REJ first as its state asks)
};

struct CmParams {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint32_t qkey = 0;  // UD
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t flow_control = 0;
  uint8_t retry_count = 0;
  uint8_t rnr_retry_count = 0;
  uint8_t srq = 0;
  uint8_t path_mtu = 0;  // ibv_mtu
  uint8_t reserved = 0;
};

struct CmRequest {
  uint32_t magic = kCmMagic;
  uint16_t op = 0;
  uint16_t reserved = 0;
  uint32_t seq = 0;
  uint32_t id = 0;        // the worker's id of a listener or connection
  uint64_t cookie = 0;    // the library's: echoed in every event of this object
  uint64_t token = 0;     // kChannel
  uint32_t client = 0;    // kChannel
  uint32_t channel = 0;   // which event connection gets this object's events
  uint32_t local_ip = 0;  // host order
  uint32_t remote_ip = 0;
  uint16_t local_port = 0;
  uint16_t remote_port = 0;
  uint16_t ps = 0;        // RDMA_PS_TCP / RDMA_PS_UDP / RDMA_PS_IB
  uint16_t qp_type = 0;   // ibv_qp_type
  uint32_t pid = 0;       // kHello
  CmParams params;
  uint32_t private_len = 0;
  uint8_t private_data[kCmPrivateMax] = {};
};

struct CmReply {
  uint32_t magic = kCmMagic;
  uint16_t op = 0;
  uint16_t reserved = 0;
  uint32_t seq = 0;
  int32_t status = 0;     // 0, or an errno
  uint32_t id = 0;        // kListen/kConnect: the new object's
  uint32_t client = 0;    // kHello
  uint64_t token = 0;     // kHello
  uint16_t port = 0;      // kListen/kConnect: the local port (picked if 0 was asked)
  uint16_t reserved2 = 0;
  uint32_t mtu = 0;       // kHello: the port's path MTU (ibv_mtu)
};

struct CmEventMsg {
  uint32_t magic = kCmMagic;
  uint32_t event = 0;     // enum rdma_cm_event_type
  int32_t status = 0;     // as rdma_cm reports it (REJ reason, -ETIMEDOUT, ...)
  uint32_t id = 0;        // the connection (a new one for CONNECT_REQUEST), or the listener
  uint32_t listen_id = 0; // CONNECT_REQUEST: the listener
  uint64_t cookie = 0;    // the object's cookie (CONNECT_REQUEST: the listener's)
  uint32_t local_ip = 0, remote_ip = 0;
  uint16_t local_port = 0, remote_port = 0;
  CmParams params;        // the remote's: QPN, PSN, resources as this side should use them
  uint32_t private_len = 0;
  uint8_t private_data[kCmPrivateMax] = {};
};

}  // namespace tandem::rnic::cm
