/* An adversarial tenant (plain libibverbs C, linked against the drop-in
 * rnic/verbs) for tests/system/adversary_exhaustion_test.py.
 *
 * exhaustion_app exhaust DEV DIR NAME: on device DEV it
 * takes PDs, CQs, QPs, registered bytes (8 MiB MRs) and MRs (4 KiB ones), each
 * until the worker refuses, then tries 9 more (all must be refused with the
 * same errno), frees one and creates one again (must succeed). One line per
 * resource (PDs and CQs count the first one, which the QPs and MRs use):
 *   RES attempted=A created=C refused=R errno=NAME again=ok|failed
 * then it writes DIR/NAME.ready and holds everything until DIR/NAME.stop
 * exists (or it is killed). Exit 0 = every resource was refused cleanly at
 * some count below the cap and the freed one came back, 1 = not, 2 = set-up.
 *
 * exhaustion_app storm DEV DIR NAME COUNT: a punt storm (DPU mode). COUNT QPs
 * are moved to RTR toward COUNT different remote addresses (10.200.x.y) no
 * route leads to, so the worker punts each miss to the agent; every 4 s they
 * are destroyed and made again, until DIR/NAME.stop. Prints "storm rounds=R
 * qps=N" at the end; writes DIR/NAME.ready after the first round.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <infiniband/verbs.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CAP 100000       /* attempts per resource before giving up: no limit seen */
#define EXTRA 9          /* attempts after the first refusal */
#define BIG (8u << 20)   /* the registered-bytes phase's MR size */
#define SMALL 4096u      /* the MR-count phase's MR size */

static struct ibv_context* ctx;
static struct ibv_pd* pd0;
static struct ibv_cq* cq0;
static int failures;

static void die(const char* what) {
  fprintf(stderr, "exhaustion_app: %s: %s\n", what, strerror(errno));
  exit(2);
}

static const char* errno_name(int e) {
  switch (e) {
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EINVAL: return "EINVAL";
    case EIO: return "EIO";
    case EFAULT: return "EFAULT";
    case 0: return "none";
    default: return "other";
  }
}

/* One object of the kind being exhausted. */
typedef void* (*make_fn)(void);
typedef void (*free_fn)(void*);

static void* make_pd(void) { return ibv_alloc_pd(ctx); }
static void free_pd(void* p) { ibv_dealloc_pd(p); }
static void* make_cq(void) { return ibv_create_cq(ctx, 4, NULL, NULL, 0); }
static void free_cq(void* p) { ibv_destroy_cq(p); }
static void* make_qp(void) {
  struct ibv_qp_init_attr a;
  memset(&a, 0, sizeof a);
  a.send_cq = cq0;
  a.recv_cq = cq0;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 4;
  a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  return ibv_create_qp(pd0, &a);
}
static void free_qp(void* p) { ibv_destroy_qp(p); }
static void* make_mr_of(size_t len) {
  void* buf = NULL;
  if (posix_memalign(&buf, 4096, len) != 0) die("posix_memalign");
  memset(buf, 0, len);  /* the application's own memory, touched as a real one would */
  struct ibv_mr* mr = ibv_reg_mr(pd0, buf, len, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) {
    int e = errno;
    free(buf);
    errno = e;
  }
  return mr;
}
static void* make_big_mr(void) { return make_mr_of(BIG); }
static void* make_small_mr(void) { return make_mr_of(SMALL); }
static void free_mr(void* p) {
  void* buf = ((struct ibv_mr*)p)->addr;
  ibv_dereg_mr(p);
  free(buf);
}

/* Exhausts one resource; objects stay in *held (count in *n), but `release`
 * frees all of them afterwards (the bytes phase, so the count phase is not cut
 * short by the bytes it left). */
static void exhaust(const char* name, make_fn make, free_fn fr, int base, int release) {
  void** held = calloc(CAP, sizeof *held);
  if (!held) die("calloc");
  int n = 0, attempted = 0, refused = 0, first_errno = 0, same = 1;
  while (n < CAP) {
    ++attempted;
    void* o = make();
    if (!o) {
      first_errno = errno;
      refused = 1;
      break;
    }
    held[n++] = o;
  }
  for (int i = 0; refused && i < EXTRA; ++i) {
    ++attempted;
    void* o = make();
    if (o) {
      held[n++] = o;
      same = 0;
      continue;
    }
    ++refused;
    if (errno != first_errno) same = 0;
  }
  int again = 0;
  if (refused && n > 1) {  /* n > 1: PD/CQ 0 are the base of the others */
    fr(held[--n]);
    void* o = make();
    if (o) {
      held[n++] = o;
      again = 1;
    }
  }
  /* base: the PD or CQ made before (the QPs' and MRs'), counted as created */
  printf("%s attempted=%d created=%d refused=%d errno=%s again=%s\n", name, attempted + base, n + base, refused,
         errno_name(first_errno), again ? "ok" : "failed");
  fflush(stdout);
  if (!refused || !same || !again) ++failures;
  if (release)
    while (n > 0) fr(held[--n]);
  /* else: held until exit, on purpose */
}

static int stop_requested(const char* dir, const char* name) {
  char path[4096];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s.stop", dir, name);
  return stat(path, &st) == 0;
}

static void touch_ready(const char* dir, const char* name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.ready", dir, name);
  FILE* f = fopen(path, "w");
  if (!f) die("ready file");
  fclose(f);
}

/* INIT, then RTR toward ::ffff:10.200.(i/256).(i%256): a remote no route leads to. */
static int to_rtr(struct ibv_qp* qp, int i) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = 0x100 + (uint32_t)i;
  a.rq_psn = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 200, (uint8_t)(i / 256), (uint8_t)(i % 256)};
  memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int storm(const char* dir, const char* name, int count) {
  struct ibv_qp** qps = calloc((size_t)count, sizeof *qps);
  if (!qps) die("calloc");
  int rounds = 0;
  while (!stop_requested(dir, name)) {
    for (int i = 0; i < count; ++i) {
      char what[64];
      qps[i] = make_qp();
      snprintf(what, sizeof what, "round %d: create_qp #%d", rounds + 1, i);
      if (!qps[i]) die(what);
      const int rc = to_rtr(qps[i], i);
      snprintf(what, sizeof what, "round %d: QP #%d to INIT/RTR (%d)", rounds + 1, i, rc);
      if (rc != 0) {
        errno = rc > 0 ? rc : errno;
        die(what);
      }
    }
    if (++rounds == 1) touch_ready(dir, name);
    for (int t = 0; t < 80 && !stop_requested(dir, name); ++t) usleep(50000);
    for (int i = 0; i < count; ++i) ibv_destroy_qp(qps[i]);
  }
  printf("storm rounds=%d qps=%d\n", rounds, count);
  return 0;
}

int main(int argc, char** argv) {
  const int is_storm = argc == 6 && strcmp(argv[1], "storm") == 0;
  if (!is_storm && !(argc == 5 && strcmp(argv[1], "exhaust") == 0)) {
    fprintf(stderr, "usage: exhaustion_app exhaust DEV DIR NAME | storm DEV DIR NAME COUNT\n");
    return 2;
  }
  int n = 0;
  struct ibv_device** l = ibv_get_device_list(&n);
  if (!l) die("ibv_get_device_list");
  for (int i = 0; i < n && !ctx; ++i)
    if (strcmp(ibv_get_device_name(l[i]), argv[2]) == 0) ctx = ibv_open_device(l[i]);
  ibv_free_device_list(l);
  if (!ctx) die("ibv_open_device");
  pd0 = ibv_alloc_pd(ctx);
  cq0 = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  if (!pd0 || !cq0) die("base PD/CQ");
  if (is_storm) return storm(argv[3], argv[4], atoi(argv[5]));

  exhaust("pds", make_pd, free_pd, 1, 0);
  exhaust("cqs", make_cq, free_cq, 1, 0);
  exhaust("qps", make_qp, free_qp, 0, 0);
  exhaust("bytes", make_big_mr, free_mr, 0, 1);
  exhaust("mrs", make_small_mr, free_mr, 0, 0);

  touch_ready(argv[3], argv[4]);
  for (int i = 0; i < 6000 && !stop_requested(argv[3], argv[4]); ++i) usleep(50000);
  return failures ? 1 : 0;
}
