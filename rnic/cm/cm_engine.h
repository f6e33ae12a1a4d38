// The connection manager's state machine (IBA vol. 1 chapter 12, as the
// kernel's drivers/infiniband/core/cm.c and cma.c run it for rdma_cm over
// RoCE), with no I/O and no clock: commands from applications (listen,
// connect, accept, ...), MADs from the lcore (gsi_ring.h) and the time come
// in; MADs to send (GsiOut), events for applications and route probes go out
// into the outboxes, which the caller (cm_service.h) drains. One engine per
// worker port: it owns every listener and connection of the port's vNICs,
// as the kernel's CM owns a port's, so retries, timeouts and an application's
// death are handled whether or not the application is running.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "rnic/cm/cm_protocol.h"
#include "rnic/cm/gsi_ring.h"
#include "rnic/cm/mad.h"

namespace tandem::rnic::cm {

struct CmVnic {
  uint32_t id = 0;
  uint32_t ip = 0;        // overlay IPv4, host order
  uint16_t pkey = 0xFFFF; // BTH P_Key of its tenant (wire form)
  uint32_t vni = 0;
  uint64_t guid = 0;      // its CA GUID (EUI-64 of the vNIC MAC)
};

struct CmConfig {
  uint8_t response_timeout = 16;  // our CM's response time we announce: 4.096 us * 2^16 = 268 ms
  uint8_t max_retries = 8;        // MADs resent before a connection attempt fails
  uint8_t mra_timeout = 24;       // service timeout an MRA asks for while the application decides
  uint64_t mra_after_ns = 50'000'000;  // a REQ not answered by the application this long gets an MRA
  uint64_t timewait_ns = 100'000'000;  // a closed connection's IDs stay reserved this long
  uint8_t path_mtu = 3;           // ibv_mtu of the port
  uint32_t comm_id_seed = 1;      // first local communication ID (tests pick it)
};

struct CmCounters {
  uint64_t mads_in = 0, mads_out = 0, bad_mads = 0, unsolicited = 0, duplicates = 0, stale = 0;
  uint64_t no_listener = 0, tenant_refused = 0, no_vnic = 0, retries = 0, timeouts = 0;
  uint64_t established = 0, rejected_sent = 0, rejected_rcvd = 0, disconnects = 0;
  uint64_t out_full = 0;  // MADs the engine could not queue to the lcore
};

enum class ConnState : uint8_t {
  kReqSent, kReqRcvd, kRepSent, kRepRcvd, kEstablished, kDreqSent, kTimewait, kSidrReqSent, kSidrReqRcvd,
};
const char* conn_state_name(ConnState s) noexcept;

// Where a MAD came from (the lcore's GsiIn without the bytes).
struct MadSource {
  uint32_t underlay = 0;
  uint8_t mac[6] = {};
  uint16_t pkey = 0xFFFF;
  bool has_vni = false;
  uint32_t vni = 0;
  uint32_t req_vnic = 0;  // REQ/SIDR_REQ: id + 1 of the vNIC the remote GID names
  uint32_t req_route_underlay = 0;
};

class CmEngine {
 public:
  struct Event {
    uint32_t client = 0;
    uint32_t channel = 0;
    CmEventMsg msg;
  };

  explicit CmEngine(CmConfig c = {}) : c_(c), next_id_(c.comm_id_seed ? c.comm_id_seed : 1) {}

  void set_vnics(std::vector<CmVnic> v) { vnics_ = std::move(v); }
  const std::vector<CmVnic>& vnics() const noexcept { return vnics_; }
  // A client attached, bound to vnic_ip (0: any of the port's vNICs).
  void add_client(uint32_t client, uint32_t vnic_ip) { clients_[client] = vnic_ip; }
  // Its listeners go, its connections are closed as the kernel closes a dead process's (DREQ, REJ).
  void remove_client(uint32_t client, uint64_t now);

  // Commands (the reply's status: 0 or an errno). `now` for their timers.
  int resolve(uint32_t client, const CmRequest& r, uint64_t now);
  int listen(uint32_t client, const CmRequest& r, uint32_t* id, uint16_t* port);
  int connect(uint32_t client, const CmRequest& r, uint64_t now, uint32_t* id, uint16_t* port);
  int accept(uint32_t client, const CmRequest& r, uint64_t now);
  int reject(uint32_t client, const CmRequest& r, uint64_t now);
  int establish(uint32_t client, const CmRequest& r, uint64_t now);
  int disconnect(uint32_t client, const CmRequest& r, uint64_t now);
  int destroy(uint32_t client, const CmRequest& r, uint64_t now);

  // Input from the lcore.
  void on_mad(const MadSource& src, const uint8_t* mad, uint64_t now);
  void on_route(uint32_t probe, uint32_t route_underlay);
  // Timers due by `now`; returns the next deadline (UINT64_MAX: none).
  uint64_t tick(uint64_t now);

  // Outboxes: the caller takes them (and clears them).
  std::vector<GsiOut>& mads_out() noexcept { return mads_; }
  std::vector<Event>& events_out() noexcept { return events_; }

  const CmCounters& counters() const noexcept { return k_; }
  std::size_t connections() const noexcept { return conns_.size(); }
  std::size_t listeners() const noexcept { return listeners_.size(); }
  // The state of a connection (tests), or false if gone.
  bool state_of(uint32_t id, ConnState* s) const noexcept;

 private:
  struct Conn {
    uint32_t id = 0, remote_id = 0;
    uint64_t tid = 0;
    uint32_t client = 0, channel = 0;
    uint64_t cookie = 0;
    uint32_t listen_id = 0;
    bool active = false;
    ConnState st = ConnState::kReqSent;
    uint32_t vnic_id = 0;
    uint16_t pkey = 0xFFFF;
    uint32_t local_ip = 0, remote_ip = 0;
    uint16_t local_port = 0, remote_port = 0;
    uint64_t service_id = 0;
    uint64_t remote_guid = 0;
    uint32_t remote_underlay = 0;  // where the peer's MADs must come from (0: any, before its first)
    uint16_t qp_type = 0;
    CmParams local, remote;
    uint8_t peer_timeout = 16;     // the peer's announced response time (exponent)
    uint8_t peer_retries = 8;
    // The last MAD this side sent that waits for an answer, resent on its timer.
    uint8_t last[kMadLen];
    bool has_timer = false;
    uint64_t deadline = 0;
    uint64_t timeout_ns = 0;
    uint32_t retries_left = 0;
    uint64_t mra_at = 0;           // passive: MRA due (0: sent or not needed)
  };
  struct Listener {
    uint32_t id = 0, client = 0, channel = 0;
    uint64_t cookie = 0;
    uint32_t vnic_ip = 0;  // 0: every vNIC the client may use
    uint64_t service_id = 0;
  };
  struct Probe {
    uint32_t client = 0, channel = 0;
    uint64_t cookie = 0;
    std::vector<uint32_t> vnics;  // candidates left, in order
    uint32_t remote_ip = 0;
    uint16_t port = 0;
  };

  const CmVnic* vnic_by_id(uint32_t id) const noexcept;
  const CmVnic* vnic_by_ip(uint32_t ip) const noexcept;
  bool client_may_use(uint32_t client, const CmVnic& v) const noexcept;
  Conn* conn(uint32_t id) noexcept;
  Conn* owned(uint32_t client, uint32_t id) noexcept;
  uint32_t new_id() noexcept;
  uint16_t pick_port() noexcept;
  uint64_t new_tid() noexcept { return (uint64_t{0x54} << 56) | ++tid_seq_; }

  void send(const Conn& c, const CmMsg& m);
  void send_reply(const MadSource& src, const CmMsg& m);
  void arm(Conn& c, uint64_t now, uint64_t timeout_ns, uint32_t retries);
  void event(const Conn& c, uint32_t type, int32_t status, const uint8_t* priv = nullptr, uint32_t priv_len = 0);
  void enter_timewait(Conn& c, uint64_t now);
  void send_rej(Conn& c, RejReason why, MsgKind kind, const uint8_t* priv, uint32_t len);
  void send_dreq(Conn& c, uint64_t now);
  CmMsg msg(Attr a, const Conn& c) const noexcept;

  void on_req(const MadSource& src, const CmMsg& m, uint64_t now);
  void on_rep(const MadSource& src, const CmMsg& m, uint64_t now);
  void on_rtu(const CmMsg& m);
  void on_rej(const CmMsg& m, uint64_t now);
  void on_mra(const CmMsg& m, uint64_t now);
  void on_dreq(const MadSource& src, const CmMsg& m, uint64_t now);
  void on_drep(const CmMsg& m, uint64_t now);
  void on_sidr_req(const MadSource& src, const CmMsg& m, uint64_t now);
  void on_sidr_rep(const CmMsg& m);
  void on_timeout(Conn& c, uint64_t now);
  void next_probe(uint32_t probe_id, Probe& p);
  bool from_peer(const Conn& c, const MadSource& src) const noexcept;

  CmConfig c_;
  std::vector<CmVnic> vnics_;
  std::unordered_map<uint32_t, uint32_t> clients_;  // client -> bound vNIC IP (0: any)
  std::unordered_map<uint32_t, Conn> conns_;        // by local communication ID
  std::unordered_map<uint32_t, Listener> listeners_;
  std::unordered_map<uint32_t, Probe> probes_;
  uint32_t next_id_;
  uint32_t next_probe_ = 1;
  uint64_t tid_seq_ = 0;
  uint16_t next_port_ = 0;
  std::vector<GsiOut> mads_;
  std::vector<Event> events_;
  CmCounters k_;
  const MadSource* cur_src_ = nullptr;  // the MAD being handled (REP to a REQ goes back its way)
};

}  // namespace tandem::rnic::cm
