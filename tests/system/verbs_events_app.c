/* Asynchronous events of the drop-in libibverbs, raised one by one, for
 * tests/system/verbs_events_test.py (plain libibverbs C). Devices A and B are
 * opened in this process; every event is waited for with poll() on A's
 * context->async_fd, taken with ibv_get_async_event and acknowledged.
 *
 *   verbs_events_app DEV_A DEV_B
 *     nonblocking: with nothing raised, ibv_get_async_event on the
 *       O_NONBLOCK async_fd fails with EAGAIN;
 *     QP fatal: a SEND whose SGE names an unknown lkey: the worker fails the
 *       WR and moves the QP to ERR -> IBV_EVENT_QP_FATAL (that QP);
 *     CQ error: 16 signaled WRITEs into a CQ of 4 -> IBV_EVENT_CQ_ERR (that
 *       CQ) and QP fatal for the QP completing into it;
 *     SRQ limit: an SRQ created with srq_limit 3 (ibv_query_srq says 3), then
 *       armed at 5 with ibv_modify_srq over 8 posted receives; 4 SENDs from B
 *       consume 4 -> IBV_EVENT_SRQ_LIMIT_REACHED (that SRQ), srq_limit 0 after;
 *     last WQE reached: the SRQ's QP moved to ERR -> IBV_EVENT_QP_LAST_WQE_REACHED;
 *     port: prints "ready port" and waits for IBV_EVENT_PORT_ERR then
 *       IBV_EVENT_PORT_ACTIVE (the test stops and restarts the fabric; the
 *       port's state in ibv_query_port follows);
 *     device fatal: prints "ready kill" and waits for IBV_EVENT_DEVICE_FATAL
 *       (the test kills A's worker).
 *   Prints "event NAME" per event taken, "ok STEP" per step, "events ok" at
 *   the end, or "FAIL ..." and exits 1. A hung run dies of SIGALRM. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <infiniband/verbs.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUF (1 << 20)

struct side {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_mr* mr;
  char* buf;
  union ibv_gid gid;
};

static void die(const char* what) {
  printf("FAIL %s: %s\n", what, strerror(errno));
  exit(1);
}

#define WANT(cond, ...)       \
  do {                        \
    if (!(cond)) {            \
      printf("FAIL " __VA_ARGS__); \
      printf("\n");           \
      exit(1);                \
    }                         \
  } while (0)

static struct ibv_context* open_named(const char* name) {
  int n = 0;
  struct ibv_device** l = ibv_get_device_list(&n);
  if (!l) die("ibv_get_device_list");
  for (int i = 0; i < n; ++i)
    if (strcmp(ibv_get_device_name(l[i]), name) == 0) {
      struct ibv_context* c = ibv_open_device(l[i]);
      ibv_free_device_list(l);
      if (!c) die("ibv_open_device");
      return c;
    }
  printf("FAIL no device %s\n", name);
  exit(1);
}

static void open_side(struct side* s, const char* dev) {
  s->ctx = open_named(dev);
  s->pd = ibv_alloc_pd(s->ctx);
  if (!s->pd) die("ibv_alloc_pd");
  s->buf = aligned_alloc(4096, BUF);
  memset(s->buf, 0, BUF);
  s->mr = ibv_reg_mr(s->pd, s->buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!s->mr) die("ibv_reg_mr");
  if (ibv_query_gid(s->ctx, 1, 0, &s->gid)) die("ibv_query_gid");
}

static struct ibv_qp* make_qp(struct side* s, struct ibv_cq* cq, struct ibv_srq* srq) {
  struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 32, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(s->pd, &ia);
  if (!qp) die("ibv_create_qp");
  return qp;
}

static void connect_qp(struct ibv_qp* qp, struct ibv_qp* peer, const union ibv_gid* peer_gid) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) die("INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer->qp_num;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = *peer_gid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                IBV_QP_MAX_QP_RD_ATOMIC))
    die("RTS");
}

/* A connected pair: QP on A (its CQ, optionally an SRQ) and QP on B. */
struct pair {
  struct ibv_cq *cq_a, *cq_b;
  struct ibv_qp *qa, *qb;
};
static struct pair make_pair(struct side* a, struct side* b, int cqe_a, struct ibv_srq* srq) {
  struct pair p;
  p.cq_a = ibv_create_cq(a->ctx, cqe_a, NULL, NULL, 0);
  p.cq_b = ibv_create_cq(b->ctx, 64, NULL, NULL, 0);
  if (!p.cq_a || !p.cq_b) die("ibv_create_cq");
  p.qa = make_qp(a, p.cq_a, srq);
  p.qb = make_qp(b, p.cq_b, NULL);
  connect_qp(p.qa, p.qb, &b->gid);
  connect_qp(p.qb, p.qa, &a->gid);
  return p;
}

static void post(struct ibv_qp* qp, enum ibv_wr_opcode op, struct side* s, uint32_t lkey, uint64_t raddr,
                 uint32_t rkey, uint64_t id) {
  struct ibv_sge sg = {.addr = (uintptr_t)s->buf + (id % 16) * 4096, .length = 64, .lkey = lkey};
  struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sg, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  if (ibv_post_send(qp, &wr, &bad)) die("ibv_post_send");
}

static const char* name_of(enum ibv_event_type t) { return ibv_event_type_str(t); }

/* Waits (poll on async_fd, up to ms) for an event of type `want`; every
 * event taken is printed and acknowledged. Returns it (copied) or exits. */
static struct ibv_async_event wait_event(struct ibv_context* ctx, enum ibv_event_type want, int ms) {
  for (int waited = 0; waited <= ms; waited += 100) {
    struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
    if (poll(&p, 1, 100) < 0 && errno != EINTR) die("poll async_fd");
    struct ibv_async_event ev;
    while (ibv_get_async_event(ctx, &ev) == 0) {
      printf("event %s\n", name_of(ev.event_type));
      struct ibv_async_event copy = ev;
      ibv_ack_async_event(&ev);
      if (copy.event_type == want) return copy;
    }
    WANT(errno == EAGAIN, "ibv_get_async_event: %s", strerror(errno));
  }
  printf("FAIL no %s within %d ms\n", name_of(want), ms);
  exit(1);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: verbs_events_app DEV_A DEV_B\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  alarm(120);
  struct side a, b;
  open_side(&a, argv[1]);
  open_side(&b, argv[2]);
  const int fl = fcntl(a.ctx->async_fd, F_GETFL);
  if (fl < 0 || fcntl(a.ctx->async_fd, F_SETFL, fl | O_NONBLOCK) < 0) die("O_NONBLOCK on async_fd");

  struct ibv_async_event ev;
  WANT(ibv_get_async_event(a.ctx, &ev) == -1 && errno == EAGAIN, "an event before any was raised");
  printf("ok nonblocking\n");

  /* QP fatal: an unknown lkey in a SEND. */
  struct pair p1 = make_pair(&a, &b, 64, NULL);
  post(p1.qa, IBV_WR_SEND, &a, a.mr->lkey + 0x100, 0, 0, 1);
  ev = wait_event(a.ctx, IBV_EVENT_QP_FATAL, 5000);
  WANT(ev.element.qp == p1.qa, "QP fatal names QP %u, not %u", ev.element.qp->qp_num, p1.qa->qp_num);
  printf("ok qp_fatal\n");

  /* CQ error: a CQ of 4 takes 16 signaled WRITEs. */
  struct pair p2 = make_pair(&a, &b, 4, NULL);
  for (int i = 0; i < 16; ++i) post(p2.qa, IBV_WR_RDMA_WRITE, &a, a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey, 100 + i);
  ev = wait_event(a.ctx, IBV_EVENT_CQ_ERR, 5000);
  WANT(ev.element.cq == p2.cq_a, "CQ error names another CQ");
  printf("ok cq_err\n");

  /* SRQ limit: at creation, then armed with ibv_modify_srq. */
  struct ibv_srq_init_attr si = {.attr = {.max_wr = 16, .max_sge = 1, .srq_limit = 3}};
  struct ibv_srq* srq0 = ibv_create_srq(a.pd, &si);
  if (!srq0) die("ibv_create_srq with srq_limit 3");
  struct ibv_srq_attr sa;
  WANT(ibv_query_srq(srq0, &sa) == 0 && sa.srq_limit == 3, "ibv_query_srq: srq_limit %u, want 3", sa.srq_limit);
  ibv_destroy_srq(srq0);
  si.attr.srq_limit = 0;
  struct ibv_srq* srq = ibv_create_srq(a.pd, &si);
  if (!srq) die("ibv_create_srq");
  for (int i = 0; i < 8; ++i) {
    struct ibv_sge sg = {.addr = (uintptr_t)a.buf + 512 * 1024 + i * 4096, .length = 4096, .lkey = a.mr->lkey};
    struct ibv_recv_wr rw = {.wr_id = 200 + i, .sg_list = &sg, .num_sge = 1}, *bad;
    if (ibv_post_srq_recv(srq, &rw, &bad)) die("ibv_post_srq_recv");
  }
  sa.srq_limit = 5;
  WANT(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0, "ibv_modify_srq arming 5: %s", strerror(errno));
  struct pair p3 = make_pair(&a, &b, 64, srq);
  for (int i = 0; i < 4; ++i) post(p3.qb, IBV_WR_SEND, &b, b.mr->lkey, 0, 0, 300 + i);
  ev = wait_event(a.ctx, IBV_EVENT_SRQ_LIMIT_REACHED, 5000);
  WANT(ev.element.srq == srq, "SRQ limit names another SRQ");
  WANT(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 0, "srq_limit after the event: %u, want 0", sa.srq_limit);
  printf("ok srq_limit\n");

  /* Last WQE reached: the SRQ's QP to ERR. */
  struct ibv_qp_attr qa = {.qp_state = IBV_QPS_ERR};
  if (ibv_modify_qp(p3.qa, &qa, IBV_QP_STATE)) die("modify to ERR");
  ev = wait_event(a.ctx, IBV_EVENT_QP_LAST_WQE_REACHED, 5000);
  WANT(ev.element.qp == p3.qa, "last WQE reached names another QP");
  printf("ok last_wqe\n");

  /* Port down and up (the test flaps the fabric). */
  struct ibv_port_attr pa;
  WANT(ibv_query_port(a.ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE, "port not active before the flap");
  printf("ready port\n");
  wait_event(a.ctx, IBV_EVENT_PORT_ERR, 30000);
  WANT(ibv_query_port(a.ctx, 1, &pa) == 0 && pa.state == IBV_PORT_DOWN, "ibv_query_port after PORT_ERR: %d",
       pa.state);
  wait_event(a.ctx, IBV_EVENT_PORT_ACTIVE, 30000);
  WANT(ibv_query_port(a.ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE, "ibv_query_port after PORT_ACTIVE: %d",
       pa.state);
  printf("ok port\n");

  /* Device fatal (the test kills A's worker). */
  printf("ready kill\n");
  wait_event(a.ctx, IBV_EVENT_DEVICE_FATAL, 30000);
  printf("ok device_fatal\n");
  WANT(ibv_get_async_event(a.ctx, &ev) == -1 && errno == EAGAIN, "a second device fatal");
  printf("events ok\n");
  return 0;
}
