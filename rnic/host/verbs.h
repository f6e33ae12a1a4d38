// The tenant application library: verbs over shared memory with a Tandem RNIC
// worker. Names and types follow rdma-core (<infiniband/verbs.h> is used for
// its types only; libibverbs is not linked), so porting a verbs program is
// mechanical:
//   ibv_open_device -> open_device(socket_path)   malloc(n) -> alloc_buf(ctx, n)
//   ibv_alloc_pd -> alloc_pd   ibv_reg_mr -> reg_mr   ibv_create_cq -> create_cq
//   ibv_create_qp -> create_qp(pd, QpInitAttr*)   ibv_modify_qp -> modify_qp
//   ibv_post_send / post_recv / poll_cq -> post_send / post_recv / poll_cq
// Registered memory must come from alloc_buf(): the worker can only reach
// memory that lives in a memfd it was given.
//
// Functions returning a pointer return nullptr on error; functions returning
// int return 0 or a Status value (poll_cq: a count, or -Status). Either way
// last_status() / last_error() tell what went wrong, per thread.
// Thread safety: control calls may come from any thread; post_send/post_recv
// on one QP and poll_cq on one CQ must come from one thread at a time (each
// ring has a single producer and a single consumer).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "rnic/host/host_status.h"
#include "rnic/host/queue_layout.h"
#include "rnic/host/shm_region.h"
#include "rnic/host/spsc_ring.h"

namespace tandem::rnic::host {

struct Context;

struct DeviceAttr {
  const char* name = "app";  // shown in the worker's logs
  bool huge_buffers = true;  // alloc_buf tries MFD_HUGETLB first
  bool huge_queues = false;  // per-QP/CQ rings on huge pages: 2 MB each, so off by default
  int timeout_ms = 5000;     // control calls fail with kTimeout after this
  // The vNIC (overlay IPv4, e.g. "192.168.7.1") this application uses: its
  // QPs get routes only from that vNIC's tenant. nullptr: not bound (the
  // worker picks whichever of its vNICs has a route; one trust domain).
  const char* vnic = nullptr;
  // The uid the worker must run as (checked on the socket's SO_PEERCRED before
  // anything is sent: the application hands the worker its memory). -1: no
  // check. Root is always accepted. The drop-in libibverbs passes the owner of
  // the device's registry record. A mismatch fails with kAccessDenied.
  int64_t worker_uid = -1;
};

struct Pd {
  Context* context;
  uint32_t handle;
};

struct Mr {
  Context* context;
  Pd* pd;
  void* addr;
  std::size_t length;
  uint32_t lkey;
  uint32_t rkey;
  bool hugetlb;  // the buffer is on huge pages (zero copy possible on a real NIC)
};

struct CompChannel;
struct Qp;

struct Cq {
  Context* context;
  void* cq_context;
  CompChannel* channel;
  int cqe;  // ring entries (>= what was asked)
  uint32_t handle;
  bool hugetlb;
  ShmRegion ring_memory;
  RingReader<Cqe> ring;
  const uint64_t* timestamps;  // created with timestamps: the worker's clock (ns) per slot, else nullptr
  CqNotify* notify;
  uint32_t empty_polls;
  std::mutex qps_mu;       // guards qps
  std::vector<Qp*> qps;    // QPs completing here: flushed by poll_cq if the worker dies
};

// Shared receive queue (ibv_srq): one receive ring any QP created on it
// consumes, in posting order, as its messages arrive.
struct Srq {
  Context* context;
  Pd* pd;
  void* srq_context;
  uint32_t handle;
  uint32_t max_wr;   // ring entries (>= what was asked)
  uint32_t max_sge;
  uint32_t doorbell_bit;
  bool hugetlb;
  ShmRegion ring_memory;
  RingWriter<RecvWqe> ring;
  std::mutex post_mu;  // verbs lets several threads post to one SRQ
};

// Address handle (ibv_ah) of a UD destination: its RoCEv2 GID's IPv4. The
// application's library keeps it; which destinations a QP may reach is the
// worker's decision per datagram (its vNIC's routes), whatever the AH says.
struct Ah {
  ibv_ah ibv;       // first: what the application holds (ibv_send_wr.wr.ud.ah)
  Context* owner;   // post_send refuses another context's AH
  uint32_t ipv4;    // host order
};

struct QpInitAttr {
  void* qp_context = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  ibv_qp_cap cap{};  // max_send_wr/max_recv_wr/sges/inline; updated to what was granted
  ibv_qp_type qp_type = IBV_QPT_RC;  // or IBV_QPT_UD
  int sq_sig_all = 0;
  Srq* srq = nullptr;  // receives come from this SRQ (cap.max_recv_wr/sge are then ignored)
};

struct Qp {
  Context* context;
  Pd* pd;
  Cq* send_cq;
  Cq* recv_cq;
  void* qp_context;
  uint32_t qp_num;
  ibv_qp_state state;
  ibv_qp_type qp_type;
  ibv_qp_cap cap;
  bool hugetlb;
  uint32_t doorbell_bit;
  ShmRegion queue_memory;
  RingWriter<SendWqe> sq;
  RingWriter<RecvWqe> rq;
  Srq* srq;  // nullptr: its own RQ
  // After the worker died: the next SQ/RQ entries poll_cq flushes, once
  // started (the worker's RingControl::completed is where it starts).
  bool sq_flushing, rq_flushing;
  uint32_t sq_flush_at, rq_flush_at;
};

// Attach: connect to the worker's Unix socket and negotiate the protocol version.
Context* open_device(const char* socket_path, const DeviceAttr& attr = {});
// Detach: the worker frees everything this context still owns.
int close_device(Context* ctx);
uint32_t app_id(const Context* ctx);
uint16_t protocol_version(const Context* ctx);

// Shared (memfd) memory that reg_mr can register; huge pages when possible.
void* alloc_buf(Context* ctx, std::size_t length);
int free_buf(Context* ctx, void* addr);
// Makes memory the application allocated itself registrable: the pages holding
// [addr, addr + length) move onto a memfd at the same address, contents kept
// (ShmRegion::adopt). A range already inside one buffer is left as it is; one
// that partly overlaps a buffer is refused (kInvalidArgument), since moving it
// again would cut the worker off from MRs registered on the old pages.
// Unmapped memory: kBadRegion. The pages stay shared (not copy-on-write) in a
// forked child.
int adopt_buf(Context* ctx, void* addr, std::size_t length);
// True if the alloc_buf() buffer holding addr is on huge pages.
bool buf_is_hugetlb(Context* ctx, const void* addr);

// An AH for a RoCEv2 destination: is_global with an IPv4-mapped dgid
// (kInvalidArgument otherwise). No worker round trip.
Ah* create_ah(Pd* pd, const ibv_ah_attr* attr);
int destroy_ah(Ah* ah);
Pd* alloc_pd(Context* ctx);
int dealloc_pd(Pd* pd);

// addr..addr+length must lie in one alloc_buf() buffer (else kNotShared).
Mr* reg_mr(Pd* pd, void* addr, std::size_t length, int access);
int dereg_mr(Mr* mr);
// ibv_rereg_mr's new PD (pd != nullptr) and/or access (access >= 0) in place:
// keys, address and memory unchanged (protocol v2). A new translation is a new
// registration: reg_mr the new range, then dereg_mr the old.
int rereg_mr(Mr* mr, Pd* pd, int access);

// Completion channel (ibv_create_comp_channel): an eventfd the worker kicks
// when it completes into an armed CQ. fd() is pollable like channel->fd.
CompChannel* create_comp_channel(Context* ctx);
int destroy_comp_channel(CompChannel* channel);  // kBusy while CQs use it
int comp_channel_fd(const CompChannel* channel);

// timestamps (protocol v2): each completion also carries the worker's clock
// (ns) when it was written (poll_cq's `timestamps`).
Cq* create_cq(Context* ctx, int cqe, void* cq_context = nullptr, CompChannel* channel = nullptr,
              bool timestamps = false);
int destroy_cq(Cq* cq);
// ibv_resize_cq (protocol v2): a new ring of at least cqe entries that keeps
// the completions not yet polled (kInvalidArgument if more than fit). Must not
// run while another thread polls this CQ.
int resize_cq(Cq* cq, int cqe);
// Arms the CQ for one event. solicited_only is treated as 0 (every completion).
int req_notify_cq(Cq* cq, int solicited_only);
// Waits for an armed CQ of the channel to fire; kTimeout after timeout_ms (-1: forever).
int get_cq_event(CompChannel* channel, Cq** cq, void** cq_context, int timeout_ms = -1);
void ack_cq_events(Cq* cq, unsigned int nevents);  // nothing to release here; kept for ports

// max_wr entries (rounded up to a power of two), max_sge SGEs per WQE;
// `limit`: IBV_EVENT_SRQ_LIMIT_REACHED armed (0: not; needs protocol v2).
Srq* create_srq(Pd* pd, uint32_t max_wr, uint32_t max_sge, void* srq_context = nullptr, uint32_t limit = 0);
// Arms the SRQ's limit (0 disarms): one IBV_EVENT_SRQ_LIMIT_REACHED once fewer
// WQEs than `limit` are left on it, then it is disarmed (ibv_modify_srq).
int modify_srq(Srq* srq, uint32_t limit);
int destroy_srq(Srq* srq);  // kBusy while QPs use it
// As post_recv, to the SRQ. An lkey this context does not know is refused
// here (kBadLkey): no QP owns the WQE yet that an error completion could go to.
int post_srq_recv(Srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

Qp* create_qp(Pd* pd, QpInitAttr* attr);
int modify_qp(Qp* qp, ibv_qp_attr* attr, int attr_mask);
int destroy_qp(Qp* qp);
// Asks the worker for the QP's state (it moves a QP to ERR on its own: a bad
// WQE, retries exhausted, a CQ overrun) and updates qp->state. A dead worker:
// kWorkerGone, and qp->state is ERR.
int query_qp_state(Qp* qp);

// Fast path: fill WQEs in the shared ring and ring the doorbell once per call.
// SGEs are not checked against the MR here (as on a real RNIC): a bad one
// comes back as an error completion.
int post_send(Qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(Qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
// If the worker died, a CQ gives back what it holds, then IBV_WC_WR_FLUSH_ERR
// for every WQE its QPs posted that the worker had not finished (an SRQ's
// WQEs stay on the SRQ, as verbs flushes them), then kWorkerGone.
int poll_cq(Cq* cq, int num_entries, ibv_wc* wc, uint64_t* timestamps = nullptr);

// True while the worker's socket is open (checks without blocking).
bool worker_alive(Context* ctx);
// The port's link as the worker reports it (ibv_query_port): false once the
// worker is gone.
bool port_active(Context* ctx);
// The worker's clock now (ns, what completion timestamps count), where the
// worker published it (a TSC clock); false otherwise.
bool device_clock_ns(Context* ctx, uint64_t* ns);

// Asynchronous events (protocol v2; queue_layout.h AsyncEvent). Wait for
// async_event_fd() (the eventfd the worker kicks; -1 on a v1 worker) or for
// control_fd() to hang up (the worker went away), then take them with
// next_async_event: false when none is waiting. The worker's death is
// reported once, as IBV_EVENT_DEVICE_FATAL. Any thread.
int async_event_fd(const Context* ctx);
int control_fd(const Context* ctx);
bool next_async_event(Context* ctx, AsyncEvent* out);

Status last_status();
const char* last_error();

}  // namespace tandem::rnic::host
