/* A verbs program (plain libibverbs C, linked against the drop-in rnic/verbs)
 * that makes the transport fail under it, for tests/system/verbs_faults_test.py.
 *
 *   verbs_fault_app overrun DEV_A DEV_B
 *     A's send CQ holds 4 completions; 16 signaled WRITEs A -> B are posted
 *     without polling. Verbs' CQ overrun: the CQ goes to error and the QP that
 *     completed into it to ERR. Prints "overrun ok=N poll=R state=S" (N
 *     successful completions before poll_cq failed with R, S the QP's state).
 *   verbs_fault_app death DEV_A DEV_B
 *     Keeps 16 64 KiB WRITEs A -> B in flight, printing "running" once 200 have
 *     completed; the test then kills A's worker with SIGKILL. Prints "death
 *     ok=N flush=F err=E poll=R" when poll_cq fails: F WQEs came back with
 *     IBV_WC_WR_FLUSH_ERR first. A hung run dies of SIGALRM after 30 s.
 *   verbs_fault_app wrapi DEV_A DEV_B
 *     Not a fault: the extended send API end to end first. A's QP comes from
 *     ibv_create_qp_ex; one ibv_wr_* batch posts WRITE 64 KiB, WRITE_IMM,
 *     SEND (inline), SEND_IMM and READ; B receives; every byte and completion is
 *     checked, then a FETCH_ADD and a CMP_SWP batch must return the original
 *     values and leave the swapped one, and an aborted batch must post nothing.
 *     Prints "wrapi ok" or what differed.
 * Both devices are opened in this one process and their QPs connected back
 * to back (GID index 0 of each). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUF (1 << 20)

struct side {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_mr* mr;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  union ibv_gid gid;
  char* buf;
};

static void die(const char* what) {
  fprintf(stderr, "verbs_fault_app: %s: %s\n", what, strerror(errno));
  exit(2);
}

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
  fprintf(stderr, "verbs_fault_app: no device %s\n", name);
  exit(2);
}

static void make_side_ex(struct side* s, const char* dev, int cqe, int ex) {
  s->ctx = open_named(dev);
  s->pd = ibv_alloc_pd(s->ctx);
  if (!s->pd) die("ibv_alloc_pd");
  s->buf = aligned_alloc(4096, BUF);
  memset(s->buf, 0x11, BUF);
  s->mr = ibv_reg_mr(s->pd, s->buf, BUF,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  if (!s->mr) die("ibv_reg_mr");
  s->cq = ibv_create_cq(s->ctx, cqe, NULL, NULL, 0);
  if (!s->cq) die("ibv_create_cq");
  struct ibv_qp_init_attr ia = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 32, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  if (ex) {
    struct ibv_qp_init_attr_ex ix = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
                                     .cap = {.max_send_wr = 32, .max_recv_wr = 4, .max_send_sge = 2,
                                             .max_recv_sge = 1, .max_inline_data = 64},
                                     .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                                     .pd = s->pd,
                                     .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                                       IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                                       IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                                                       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP};
    s->qp = ibv_create_qp_ex(s->ctx, &ix);
    if (!s->qp) die("ibv_create_qp_ex");
  } else {
    s->qp = ibv_create_qp(s->pd, &ia);
    if (!s->qp) die("ibv_create_qp");
  }
  if (ibv_query_gid(s->ctx, 1, 0, &s->gid)) die("ibv_query_gid");
}

static void make_side(struct side* s, const char* dev, int cqe) { make_side_ex(s, dev, cqe, 0); }

static void connect_to(struct side* s, const struct side* peer) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_ATOMIC};
  if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("modify INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer->qp->qp_num;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = peer->gid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("modify RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                   IBV_QP_MAX_QP_RD_ATOMIC))
    die("modify RTS");
}

static int post_write(struct side* s, const struct side* peer, uint64_t id, uint32_t len) {
  struct ibv_sge sg = {.addr = (uintptr_t)s->buf + (id % 8) * 65536, .length = len, .lkey = s->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_SIGNALED}, *bad;
  wr.wr.rdma.remote_addr = (uintptr_t)peer->buf + (id % 8) * 65536;
  wr.wr.rdma.rkey = peer->mr->rkey;
  return ibv_post_send(s->qp, &wr, &bad);
}

#define WANT(cond, ...)              \
  do {                               \
    if (!(cond)) {                   \
      printf("wrapi: " __VA_ARGS__); \
      printf("\n");                  \
      return 1;                      \
    }                                \
  } while (0)

static int poll_n(struct ibv_cq* cq, struct ibv_wc* wc, int n) {
  int got = 0;
  while (got < n) {
    int r = ibv_poll_cq(cq, n - got, wc + got);
    if (r < 0) return r;
    got += r;
  }
  return got;
}

/* The extended send API between A (ibv_create_qp_ex) and B (a plain QP). */
static int wrapi(const char* dev_a, const char* dev_b) {
  struct side a, b;
  make_side_ex(&a, dev_a, 64, 1);
  make_side(&b, dev_b, 64);
  connect_to(&a, &b);
  connect_to(&b, &a);
  struct ibv_qp_ex* x = ibv_qp_to_qp_ex(a.qp);
  WANT(x != NULL && ibv_qp_to_qp_ex(b.qp) == NULL, "ibv_qp_to_qp_ex: %p (A), %p (B)", (void*)x,
       (void*)ibv_qp_to_qp_ex(b.qp));
  for (int i = 0; i < BUF; ++i) a.buf[i] = (char)(i * 7 + i / 4096);
  memset(b.buf + 256 * 1024, 0x5a, 8192); /* what the READ fetches */
  for (int i = 0; i < 3; ++i) {           /* for WRITE_IMM, SEND and SEND_IMM */
    struct ibv_sge sg = {.addr = (uintptr_t)b.buf + 512 * 1024 + i * 4096, .length = 4096, .lkey = b.mr->lkey};
    struct ibv_recv_wr rw = {.wr_id = 100 + i, .sg_list = &sg, .num_sge = 1}, *bad;
    if (ibv_post_recv(b.qp, &rw, &bad)) die("ibv_post_recv");
  }
  const uintptr_t la = (uintptr_t)a.buf, rb = (uintptr_t)b.buf;
  const uint32_t rkey = b.mr->rkey, lkey = a.mr->lkey;
  char hello[] = "hello, wr api";

  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = 0;
  ibv_wr_rdma_write(x, rkey, rb);
  struct ibv_sge two[2] = {{la, 32768, lkey}, {la + 32768, 32768, lkey}};
  ibv_wr_set_sge_list(x, 2, two);
  x->wr_id = 2;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write_imm(x, rkey, rb + 65536, htonl(0x1234));
  ibv_wr_set_sge(x, lkey, la + 65536, 4096);
  x->wr_id = 3;
  ibv_wr_send(x);
  ibv_wr_set_inline_data(x, hello, sizeof hello);
  memset(hello, 0, sizeof hello); /* copied at the call, as providers do */
  x->wr_id = 4;
  ibv_wr_send_imm(x, htonl(77));
  ibv_wr_set_sge(x, lkey, la + 131072, 1000);
  x->wr_id = 5;
  ibv_wr_rdma_read(x, rkey, rb + 256 * 1024);
  ibv_wr_set_sge(x, lkey, la + 256 * 1024, 8192);
  int rc = ibv_wr_complete(x);
  WANT(rc == 0, "wr_complete: %d", rc);

  struct ibv_wc wc[8];
  WANT(poll_n(a.cq, wc, 4) == 4, "A's completions");
  for (int i = 0; i < 4; ++i)
    WANT(wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == (uint64_t)i + 2, "A's completion %d: wr_id %llu status %d",
         i, (unsigned long long)wc[i].wr_id, wc[i].status);
  WANT(wc[3].opcode == IBV_WC_RDMA_READ && wc[3].byte_len == 8192, "READ completion");
  WANT(poll_n(b.cq, wc, 3) == 3, "B's completions");
  WANT(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM && ntohl(wc[0].imm_data) == 0x1234,
       "WRITE_IMM arrival: status %d opcode %d", wc[0].status, wc[0].opcode);
  WANT(wc[1].status == IBV_WC_SUCCESS && wc[1].opcode == IBV_WC_RECV && wc[1].byte_len == sizeof hello,
       "SEND arrival: byte_len %u", wc[1].byte_len);
  WANT(wc[2].status == IBV_WC_SUCCESS && (wc[2].wc_flags & IBV_WC_WITH_IMM) && ntohl(wc[2].imm_data) == 77 &&
           wc[2].byte_len == 1000,
       "SEND_IMM arrival: byte_len %u", wc[2].byte_len);
  WANT(memcmp(b.buf, a.buf, 65536) == 0, "WRITE payload");
  WANT(memcmp(b.buf + 65536, a.buf + 65536, 4096) == 0, "WRITE_IMM payload");
  WANT(memcmp(b.buf + 512 * 1024 + 4096, "hello, wr api", sizeof hello) == 0, "inline SEND payload");
  WANT(memcmp(b.buf + 512 * 1024 + 8192, a.buf + 131072, 1000) == 0, "SEND_IMM payload");
  for (int i = 0; i < 8192; ++i) WANT(a.buf[256 * 1024 + i] == 0x5a, "READ payload at %d", i);

  const uint64_t forty = 40;
  memcpy(b.buf + 768 * 1024, &forty, 8);
  ibv_wr_start(x); /* atomics: the original values come back, the word ends swapped */
  x->wr_id = 6;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_fetch_add(x, rkey, rb + 768 * 1024, 2);
  ibv_wr_set_sge(x, lkey, la + 768 * 1024, 8);
  x->wr_id = 7;
  ibv_wr_atomic_cmp_swp(x, rkey, rb + 768 * 1024, 42, 99);
  ibv_wr_set_sge(x, lkey, la + 768 * 1024 + 8, 8);
  rc = ibv_wr_complete(x);
  WANT(rc == 0, "atomic wr_complete: %d", rc);
  WANT(poll_n(a.cq, wc, 2) == 2, "atomic completions");
  WANT(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_FETCH_ADD && wc[0].byte_len == 8 &&
           wc[1].status == IBV_WC_SUCCESS && wc[1].opcode == IBV_WC_COMP_SWAP,
       "atomic completions: status %d/%d opcode %d/%d", wc[0].status, wc[1].status, wc[0].opcode, wc[1].opcode);
  uint64_t got[3];
  memcpy(got, a.buf + 768 * 1024, 16);
  memcpy(got + 2, b.buf + 768 * 1024, 8);
  WANT(got[0] == 40 && got[1] == 42 && got[2] == 99, "atomic values: fetched %llu, compared %llu, left %llu",
       (unsigned long long)got[0], (unsigned long long)got[1], (unsigned long long)got[2]);
  ibv_wr_start(x); /* aborted: nothing reaches B */
  x->wr_id = 9;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x, rkey, rb + 65536 * 6);
  ibv_wr_set_sge(x, lkey, la, 64);
  ibv_wr_abort(x);
  usleep(200000);
  WANT(ibv_poll_cq(a.cq, 8, wc) == 0, "a completion after wr_abort");
  WANT(b.buf[65536 * 6] == 0x11, "bytes written after wr_abort");
  printf("wrapi ok\n");
  return 0;
}

static const char* state_name(enum ibv_qp_state st) {
  return st == IBV_QPS_ERR ? "ERR" : st == IBV_QPS_RTS ? "RTS" : "other";
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: verbs_fault_app overrun|death|wrapi DEV_A DEV_B\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  alarm(30);  /* a hang ends as SIGALRM (exit by signal), never as a stuck test */
  if (strcmp(argv[1], "wrapi") == 0) return wrapi(argv[2], argv[3]);
  const int overrun = strcmp(argv[1], "overrun") == 0;
  struct side a, b;
  make_side(&a, argv[2], overrun ? 4 : 64);
  make_side(&b, argv[3], 64);
  connect_to(&a, &b);
  connect_to(&b, &a);
  struct ibv_wc wc[16];
  if (overrun) {
    for (int i = 0; i < 16; ++i)
      if (post_write(&a, &b, (uint64_t)i, 64)) die("ibv_post_send");
    usleep(500000);  /* all 16 complete into a CQ of 4 */
    int ok = 0, other = 0, r = 0;
    for (int spins = 0; spins < 1000000 && (r = ibv_poll_cq(a.cq, 16, wc)) >= 0; ++spins)
      for (int i = 0; i < r; ++i) wc[i].status == IBV_WC_SUCCESS ? ++ok : ++other;
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    ibv_query_qp(a.qp, &qa, IBV_QP_STATE, &qi);
    printf("overrun cqe=%d ok=%d other=%d poll=%d state=%s\n", a.cq->cqe, ok, other, r, state_name(qa.qp_state));
    return ok == a.cq->cqe && other == 0 && r < 0 && qa.qp_state == IBV_QPS_ERR ? 0 : 1;
  }
  uint64_t posted = 0, ok = 0, flush = 0, err = 0;
  int r = 0, posting = 1;
  for (;;) {
    while (posting && posted - ok - flush - err < 16) {
      if (post_write(&a, &b, posted, 65536) != 0) {
        posting = 0;  /* the worker is gone: take what the CQ gives back */
        break;
      }
      ++posted;
    }
    r = ibv_poll_cq(a.cq, 16, wc);
    if (r < 0) break;
    for (int i = 0; i < r; ++i) {
      if (wc[i].status == IBV_WC_SUCCESS) {
        if (++ok == 200) printf("running\n");
      } else if (wc[i].status == IBV_WC_WR_FLUSH_ERR) {
        ++flush;
        posting = 0;
      } else {
        ++err;
        posting = 0;
      }
    }
  }
  printf("death ok=%llu flush=%llu err=%llu outstanding=%llu poll=%d\n", (unsigned long long)ok,
         (unsigned long long)flush, (unsigned long long)err, (unsigned long long)(posted - ok - flush - err), r);
  return ok >= 200 && flush > 0 && posted == ok + flush + err ? 0 : 1;
}
