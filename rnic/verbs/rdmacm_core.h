// The drop-in librdmacm's internals (rdmacm_*.cc): devices and the workers
// behind them, event channels, IDs. The connection manager itself runs in the
// worker (rnic/cm); this library is its client, as rdma-core's librdmacm is
// the kernel's (its commands over a socket instead of /dev/infiniband/rdma_cm,
// its events read from the channel's fd).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rnic/cm/cm_protocol.h"

namespace tandem::rnic::rdmacm {

struct Worker;

struct Device {
  ibv_device* dev = nullptr;
  std::string name;
  uint32_t ip = 0;  // the vNIC's overlay IPv4, host order
  Worker* worker = nullptr;
  ibv_context* ctx = nullptr;  // opened on first use, kept
  ibv_pd* pd = nullptr;        // rdma_create_qp's default PD
};

struct Worker {
  std::string socket;  // the CM socket
  int fd = -1;         // command connection (-1: not connected yet)
  uint32_t client = 0;
  uint64_t token = 0;
  uint32_t seq = 0;
  uint8_t mtu = 3;
  std::mutex mu;
};

struct Id;

struct Channel {
  rdma_event_channel pub{};  // pub.fd: an epoll fd over the event connections and `local`
  uint32_t no = 0;
  int local = -1;            // eventfd: events this library made (ROUTE_RESOLVED, errors)
  std::mutex mu;
  std::map<Worker*, int> conns;     // event connection per worker
  std::deque<rdma_cm_event*> queue; // made here, not yet taken
  // Threads inside rdma_get_cm_event, and whether the channel was destroyed:
  // rping destroys it while its CM thread still waits on it (rdma-core's
  // read() on the closed fd blocks on), so a waited-on channel is never freed.
  std::atomic<int> waiters{0};
  std::atomic<bool> dead{false};
};

struct Id {
  rdma_cm_id pub{};
  Channel* channel = nullptr;
  bool own_channel = false;  // synchronous ID (channel NULL at create)
  uint64_t cookie = 0;
  Device* device = nullptr;
  Worker* worker = nullptr;
  uint32_t wid = 0;          // the worker's connection (comm) ID
  std::vector<std::pair<Worker*, uint32_t>> listens;
  std::size_t resolve_try = 0;  // unbound resolve: which worker is asked
  uint32_t psn = 0;          // the starting PSN our REQ/REP announces: our QP's rq_psn (rdmacm_qp_attr.h)
  cm::CmParams remote{};     // the peer's, from REQ/REP
  rdma_conn_param local{};   // what connect/accept asked
  bool own_cqs = false;      // rdma_create_qp made the CQs
  ibv_sa_path_rec path{};
  uint8_t ack_timeout = 14;       // rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT): the RC QP's RTS timeout
  bool app_established = false;   // rdma_establish was called: the worker's ESTABLISHED is not reported
  bool app_disconnected = false;  // rdma_disconnect was called: the DISCONNECTED event leaves the QP alone
  rdma_cm_event* sync_event = nullptr;  // synchronous IDs: the event a call waited for
  std::deque<rdma_cm_event*> requests;  // rdma_get_request: CONNECT_REQUESTs waiting
  // rdma_create_ep of a passive endpoint: rdma_get_request gives each new ID a QP of these.
  bool has_ep_qp = false;
  ibv_qp_init_attr ep_qp{};
  ibv_pd* ep_pd = nullptr;
};

// A library event with the bytes its private data points at.
struct Event {
  rdma_cm_event pub{};
  uint8_t priv[cm::kCmPrivateMax] = {};
};

// The process's devices (opened lazily), in registry order.
std::vector<Device>& devices();
Device* device_by_ip(uint32_t ip);
Device* device_by_ctx(ibv_context* ctx);
std::vector<Worker*> workers();
// Opens the device's context (and its worker's connection) if not yet.
ibv_context* open_ctx(Device& d);
// A command to a worker; -1 and errno on failure.
int command(Worker& w, cm::CmRequest& r, cm::CmReply* rep);
// The channel's event connection to w, made if missing; false (errno) on failure.
bool channel_attach(Channel& ch, Worker& w);
// Queues an event made here and makes the channel readable.
void post_local(Channel& ch, rdma_cm_event* e);
Id* id_by_cookie(uint64_t cookie);
Id* id_by_wid(Worker* w, uint32_t wid);
void index_wid(Id* id);
void unindex(Id* id);
uint64_t new_cookie(Id* id);

}  // namespace tandem::rnic::rdmacm
