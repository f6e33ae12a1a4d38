// What the system tests' tenant applications (rnic_host_app, txn_stream_app)
// share: files as the out-of-band exchange (a QP's number, rkey and buffer
// address in DIR/NAME.qp; readiness as DIR/NAME.ready), and connecting one RC
// QP to its peer through INIT, RTR, RTS as a verbs program does.
#pragma once

#include <arpa/inet.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "rnic/host/verbs.h"

namespace tandem::rnic::host::test_app {

inline constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
inline const char* g_prog = "app";          // for die()
inline std::atomic<bool>* g_stop = nullptr;  // wait_file gives up when set

[[noreturn]] inline void die(int code, const std::string& what) {
  std::fprintf(stderr, "%s: %s (%s)\n", g_prog, what.c_str(), last_error());
  std::exit(code);
}

inline bool wait_file(const std::string& path, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end && !(g_stop && g_stop->load())) {
    if (access(path.c_str(), F_OK) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Written whole or not at all (rename), so a reader never sees half a file.
inline void touch(const std::string& path, const std::string& text = "") {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), path.c_str());
}

struct Peer {
  uint32_t qpn = 0, rkey = 0;
  uint64_t addr = 0;
};

// One application's resources: a device context, a PD, one registered
// buffer of buf_len bytes, one CQ and one RC QP on it (in RESET).
struct RcApp {
  Context* ctx = nullptr;
  Pd* pd = nullptr;
  uint8_t* buf = nullptr;
  Mr* mr = nullptr;
  Cq* cq = nullptr;
  Qp* qp = nullptr;
};

inline RcApp open_rc_app(const std::string& sock, const std::string& name, std::size_t buf_len,
                         uint32_t max_recv_wr, uint32_t max_sge, const char* vnic = nullptr) {
  RcApp a;
  DeviceAttr attr;
  attr.name = name.c_str();
  attr.vnic = vnic;
  attr.huge_buffers = false;
  a.ctx = open_device(sock.c_str(), attr);
  if (!a.ctx) die(2, "open_device " + sock);
  a.pd = alloc_pd(a.ctx);
  a.buf = static_cast<uint8_t*>(alloc_buf(a.ctx, buf_len));
  if (!a.pd || !a.buf) die(2, "alloc");
  a.mr = reg_mr(a.pd, a.buf, buf_len, kAccess);
  a.cq = create_cq(a.ctx, 256);
  QpInitAttr qi;
  qi.send_cq = a.cq;
  qi.recv_cq = a.cq;
  qi.cap.max_send_wr = 64;
  qi.cap.max_recv_wr = max_recv_wr;
  qi.cap.max_send_sge = max_sge;
  qi.cap.max_recv_sge = max_sge;
  a.qp = a.mr && a.cq ? create_qp(a.pd, &qi) : nullptr;
  if (!a.qp) die(2, "reg_mr/create_cq/create_qp");
  return a;
}

inline void to_init(Qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = kAccess;
  if (modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) die(2, "INIT");
}

// Publishes this QP in DIR/NAME.qp and reads the peer's DIR/PEER.qp.
inline Peer exchange(const std::string& dir, const std::string& name, const std::string& peer_name, const Qp* qp,
                     const Mr* mr, const void* buf) {
  touch(dir + "/" + name + ".qp", std::to_string(qp->qp_num) + " " + std::to_string(mr->rkey) + " " +
                                      std::to_string(reinterpret_cast<uintptr_t>(buf)));
  if (!wait_file(dir + "/" + peer_name + ".qp", 30)) die(2, "peer did not publish its QP");
  Peer p;
  std::ifstream(dir + "/" + peer_name + ".qp") >> p.qpn >> p.rkey >> p.addr;
  return p;
}

// RTR toward the peer (its overlay IPv4 as an IPv4-mapped GID), then RTS
// with the local ACK timeout exponent `timeout` (4.096 us << timeout).
inline void connect_rc(Qp* qp, const Peer& peer, in_addr peer_ip, uint8_t timeout) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = 100;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  std::memcpy(gid + 12, &peer_ip.s_addr, 4);
  std::memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
  if (modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die(2, "RTR");
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 100;
  a.timeout = timeout;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  if (modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                            IBV_QP_MAX_QP_RD_ATOMIC))
    die(2, "RTS");
}

}  // namespace tandem::rnic::host::test_app
