/* What every hostile-tenant program of tests/system/hostile/ shares: plain
 * libibverbs C (Debian's headers, the drop-in rnic/verbs library at run time),
 * two devices of the hostile tenant on the two lab workers opened in one
 * process, an RC QP pair between them, and the runner's protocol:
 *
 *   PROG DEV_A DEV_B DIR SECONDS [ARGS...]
 *
 * The program starts its abuse, writes DIR/<prog>.ready once it is under way
 * (the runner then measures the victim), keeps at it until DIR/stop exists or
 * SECONDS passed, and prints one line per finding, "hostile <prog>: ...", then
 * "verdict ok" (it got what verbs specifies) or "verdict FAIL: why". Exit 0 =
 * ok, 1 = it got something verbs does not allow, 2 = set-up failed. A program
 * never trusts the worker to be alive: every wait has a deadline. */
#pragma once
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <infiniband/verbs.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char* h_prog = "hostile";
static const char* h_dir = ".";
static double h_seconds = 5;
static double h_t0;

static __attribute__((unused)) double h_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static __attribute__((unused)) void h_say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("hostile %s: ", h_prog);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
}

static __attribute__((unused)) void h_die(const char* what) {
  printf("hostile %s: set-up failed: %s: %s\n", h_prog, what, strerror(errno));
  printf("verdict FAIL: set-up\n");
  fflush(stdout);
  exit(2);
}

static int h_failures;
/* A finding that breaks what verbs specifies: counted, the program goes on. */
static __attribute__((unused)) void h_bad(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("hostile %s: NOT AS VERBS SPECIFIES: ", h_prog);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  ++h_failures;
}

static __attribute__((unused)) int h_verdict(void) {
  printf(h_failures ? "verdict FAIL: %d finding(s)\n" : "verdict ok\n", h_failures);
  fflush(stdout);
  return h_failures ? 1 : 0;
}

static __attribute__((unused)) void h_touch(const char* name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", h_dir, name);
  int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0) close(fd);
}

static __attribute__((unused)) void h_ready(void) {
  char n[128];
  snprintf(n, sizeof n, "%s.ready", h_prog);
  h_touch(n);
}

/* The runner's stop file, or the time is up. */
static __attribute__((unused)) int h_stop(void) {
  char p[512];
  struct stat st;
  snprintf(p, sizeof p, "%s/stop", h_dir);
  return stat(p, &st) == 0 || h_now() - h_t0 > h_seconds;
}

static __attribute__((unused)) const char* h_errno_name(int e) {
  switch (e) {
    case 0: return "none";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EINVAL: return "EINVAL";
    case EBUSY: return "EBUSY";
    case EIO: return "EIO";
    case EFAULT: return "EFAULT";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case ENODEV: return "ENODEV";
    default: return "other";
  }
}

/* argv: PROG DEV_A DEV_B DIR SECONDS ... */
static __attribute__((unused)) void h_init(int argc, char** argv, const char* prog, int want_args) {
  h_prog = prog;
  if (argc < 5 + want_args) {
    fprintf(stderr, "usage: %s DEV_A DEV_B DIR SECONDS%s\n", prog, want_args ? " ARGS..." : "");
    exit(2);
  }
  h_dir = argv[3];
  h_seconds = atof(argv[4]);
  h_t0 = h_now();
  setvbuf(stdout, NULL, _IOLBF, 0);
}

static __attribute__((unused)) struct ibv_context* h_open(const char* name) {
  int n = 0;
  struct ibv_device** l = ibv_get_device_list(&n);
  if (!l) h_die("ibv_get_device_list");
  for (int i = 0; i < n; ++i)
    if (strcmp(ibv_get_device_name(l[i]), name) == 0) {
      struct ibv_context* c = ibv_open_device(l[i]);
      ibv_free_device_list(l);
      if (!c) h_die("ibv_open_device");
      return c;
    }
  errno = ENODEV;
  h_die(name);
  return NULL;
}

/* One end of an RC connection: context, PD, CQ, QP and its GID. */
struct h_end {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  union ibv_gid gid;
};

static __attribute__((unused)) struct ibv_qp* h_qp(struct ibv_pd* pd, struct ibv_cq* cq, uint32_t depth, struct ibv_srq* srq) {
  struct ibv_qp_init_attr a;
  memset(&a, 0, sizeof a);
  a.send_cq = cq;
  a.recv_cq = cq;
  a.srq = srq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = depth;
  a.cap.max_recv_wr = depth;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  return ibv_create_qp(pd, &a);
}

static __attribute__((unused)) void h_end_make(struct h_end* e, struct ibv_context* ctx, int cqe, uint32_t depth) {
  e->ctx = ctx;
  e->pd = ibv_alloc_pd(ctx);
  if (!e->pd) h_die("ibv_alloc_pd");
  e->cq = ibv_create_cq(ctx, cqe, NULL, NULL, 0);
  if (!e->cq) h_die("ibv_create_cq");
  e->qp = h_qp(e->pd, e->cq, depth, NULL);
  if (!e->qp) h_die("ibv_create_qp");
  if (ibv_query_gid(ctx, 1, 0, &e->gid)) h_die("ibv_query_gid");
}

/* RESET -> INIT -> RTR -> RTS toward peer (QPN, GID), RNR and transport retries infinite
 * (7), as a tenant holding work back on purpose would set them. */
static __attribute__((unused)) int h_connect_qp(struct ibv_qp* qp, uint32_t peer_qpn, const union ibv_gid* peer_gid) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = 1;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = *peer_gid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 1;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 16;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                   IBV_QP_MAX_QP_RD_ATOMIC);
}

static __attribute__((unused)) void h_pair(struct h_end* a, struct h_end* b) {
  if (h_connect_qp(a->qp, b->qp->qp_num, &b->gid) || h_connect_qp(b->qp, a->qp->qp_num, &a->gid))
    h_die("connect the QP pair");
}

/* Polls cq until one completion or `seconds` pass: 1 got one, 0 none in time, -1 poll failed
 * (the CQ in error, or the worker gone). */
static __attribute__((unused)) int h_poll_one(struct ibv_cq* cq, struct ibv_wc* wc, double seconds) {
  const double end = h_now() + seconds;
  while (h_now() < end) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n != 0) return n > 0 ? 1 : -1;
    usleep(200);
  }
  return 0;
}

static __attribute__((unused)) int h_post_send(struct ibv_qp* qp, enum ibv_wr_opcode op, uint64_t id, void* addr, uint32_t len,
                       uint32_t lkey, uint64_t raddr, uint32_t rkey, int signaled) {
  struct ibv_sge sg = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = id;
  wr.sg_list = len ? &sg : NULL;
  wr.num_sge = len ? 1 : 0;
  wr.opcode = op;
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return ibv_post_send(qp, &wr, &bad);
}

static __attribute__((unused)) int h_post_recv(struct ibv_qp* qp, uint64_t id, void* addr, uint32_t len, uint32_t lkey) {
  struct ibv_sge sg = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
  struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sg, .num_sge = 1}, *bad;
  return ibv_post_recv(qp, &wr, &bad);
}

static __attribute__((unused)) void* h_alloc(size_t len, int fill) {
  void* p = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
  if (!p) h_die("aligned_alloc");
  memset(p, fill, len);
  return p;
}

/* Registers and deregisters `n` buffers of `len` (fresh ones, freed after): other
 * registrations landing where a deregistered MR was, as the finding's churn does. */
static __attribute__((unused)) void h_churn(struct ibv_pd* pd, int n, size_t len) {
  for (int i = 0; i < n; ++i) {
    char* b = h_alloc(len, i);
    struct ibv_mr* m = ibv_reg_mr(pd, b, len, IBV_ACCESS_LOCAL_WRITE);
    if (m) ibv_dereg_mr(m);
    free(b);
  }
}
