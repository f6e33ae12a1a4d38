/* Memory pulled from under zero-copy transmission: B posts 8 MiB RDMA WRITEs
 * (signaled, four outstanding) from an mmap'd buffer it registered, and at
 * once deregisters that MR and unmaps the buffer, while the worker sends
 * straight from it (external mbufs) and may have to resend from it. ROUNDS
 * times, with registrations churned between.
 *
 * Verbs: ibv_dereg_mr answers 0 or EBUSY; every WRITE completes (never
 * hangs); one that completes successfully put exactly the source's bytes at
 * A (a WRITE that read memory after it went would carry other bytes).
 *   dereg_zero_copy DEV_A DEV_B DIR SECONDS [ROUNDS] */
#include "hostile.h"
#include <sys/mman.h>


#define LEN (8u << 20)
#define OUT 4

int main(int argc, char** argv) {
  h_init(argc, argv, "dereg_zero_copy", 0);
  const int rounds = argc > 5 ? atoi(argv[5]) : 4;
  struct h_end a, b;
  h_end_make(&a, h_open(argv[1]), 64, 16);
  h_end_make(&b, h_open(argv[2]), 64, 16);
  h_pair(&a, &b);
  char* dst = h_alloc((size_t)LEN * OUT, 0);
  struct ibv_mr* dmr = ibv_reg_mr(a.pd, dst, (size_t)LEN * OUT, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!dmr) h_die("ibv_reg_mr (sink)");
  h_ready();
  for (int r = 0; r < rounds; ++r) {
    char* src = mmap(NULL, (size_t)LEN * OUT, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED) h_die("mmap");
    const unsigned char mark = (unsigned char)(0x30 + r);
    memset(src, mark, (size_t)LEN * OUT);
    memset(dst, 0, (size_t)LEN * OUT);
    struct ibv_mr* smr = ibv_reg_mr(b.pd, src, (size_t)LEN * OUT, IBV_ACCESS_LOCAL_WRITE);
    if (!smr) h_die("ibv_reg_mr (source)");
    for (int i = 0; i < OUT; ++i)
      if (h_post_send(b.qp, IBV_WR_RDMA_WRITE, (uint64_t)i, src + (size_t)i * LEN, LEN, smr->lkey,
                      (uintptr_t)dst + (size_t)i * LEN, dmr->rkey, 1))
        h_die("post WRITE");
    const int rc = ibv_dereg_mr(smr);
    if (rc == 0) munmap(src, (size_t)LEN * OUT);
    h_say("round %d: dereg right after posting %d x 8 MiB WRITEs: %d (%s)", r, OUT, rc, h_errno_name(rc));
    if (rc != 0 && rc != EBUSY) h_bad("ibv_dereg_mr returned %d, neither 0 nor EBUSY", rc);
    int ok = 0, err = 0;
    struct ibv_wc wc;
    for (int i = 0; i < OUT; ++i) {
      const int got = h_poll_one(b.cq, &wc, 10);
      if (got <= 0) {
        h_bad("round %d: WRITE %d of %d never completed", r, i, OUT);
        break;
      }
      if (wc.status != IBV_WC_SUCCESS) {
        ++err;
        continue;
      }
      ++ok;
      const char* d = dst + wc.wr_id * LEN;
      for (size_t k = 0; k < LEN; k += 4096)
        if ((unsigned char)d[k] != mark || (unsigned char)d[k + 4095] != mark) {
          h_bad("round %d: WRITE %lu completed successfully but A holds 0x%02x at +%zu, not 0x%02x", r,
                (unsigned long)wc.wr_id, (unsigned char)d[k], k, mark);
          break;
        }
    }
    h_say("round %d: %d WRITEs succeeded with the right bytes, %d failed (last: %s)", r, ok, err,
          err ? ibv_wc_status_str(wc.status) : "-");
    if (rc != 0) {
      ibv_dereg_mr(smr);
      munmap(src, (size_t)LEN * OUT);
    }
    if (err) { /* the QP is in ERR now: a fresh pair for the next round */
      ibv_destroy_qp(a.qp);
      ibv_destroy_qp(b.qp);
      a.qp = h_qp(a.pd, a.cq, 16, NULL);
      b.qp = h_qp(b.pd, b.cq, 16, NULL);
      if (!a.qp || !b.qp) h_die("ibv_create_qp");
      h_pair(&a, &b);
    }
    h_churn(b.pd, 8, LEN);
  }
  while (!h_stop()) usleep(20000);
  return h_verdict();
}
