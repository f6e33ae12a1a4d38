/* A doorbell storm and rings full of zero-length WQEs: 32 QP pairs between
 * A and B, each SQ kept full of zero-length RDMA WRITEs (one signaled in 16),
 * posted one WR per ibv_post_send call so every one rings its doorbell, as
 * fast as one core allows, until stopped.
 *
 * Verbs: a post succeeds or, on a full SQ, fails with ENOMEM; every
 * completion is successful (nothing here is wrong, only much).
 *   doorbell_storm DEV_A DEV_B DIR SECONDS */
#include "hostile.h"

#define QPS 32
#define DEPTH 256

int main(int argc, char** argv) {
  h_init(argc, argv, "doorbell_storm", 0);
  struct ibv_context* ca = h_open(argv[1]);
  struct ibv_context* cb = h_open(argv[2]);
  struct h_end a, b;
  h_end_make(&a, ca, 4096, DEPTH);
  h_end_make(&b, cb, 4096, DEPTH);
  struct ibv_qp* qa[QPS];
  struct ibv_qp* qb[QPS];
  int posted_since_signal[QPS], outstanding[QPS];
  for (int i = 0; i < QPS; ++i) {
    qa[i] = i ? h_qp(a.pd, a.cq, DEPTH, NULL) : a.qp;
    qb[i] = i ? h_qp(b.pd, b.cq, DEPTH, NULL) : b.qp;
    if (!qa[i] || !qb[i]) h_die("ibv_create_qp");
    if (h_connect_qp(qa[i], qb[i]->qp_num, &b.gid) || h_connect_qp(qb[i], qa[i]->qp_num, &a.gid)) h_die("connect");
    posted_since_signal[i] = outstanding[i] = 0;
  }
  char* buf = h_alloc(4096, 0);
  struct ibv_mr* mr = ibv_reg_mr(a.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) h_die("ibv_reg_mr");
  uint64_t posts = 0, full = 0, done = 0, bad_wc = 0;
  struct ibv_wc wc[64];
  h_ready();
  while (!h_stop()) {
    for (int i = 0; i < QPS; ++i) {
      for (int k = 0; k < 16; ++k) {
        const int sig = ++posted_since_signal[i] >= 16;
        const int rc = h_post_send(qb[i], IBV_WR_RDMA_WRITE, (uint64_t)i, NULL, 0, 0, (uintptr_t)buf, mr->rkey, sig);
        if (rc == ENOMEM) {
          ++full;
          --posted_since_signal[i];
          break;
        }
        if (rc) {
          h_bad("ibv_post_send of a zero-length WRITE: %d (%s), not 0 or ENOMEM", rc, h_errno_name(rc));
          goto out;
        }
        ++posts;
        if (sig) {
          posted_since_signal[i] = 0;
          ++outstanding[i];
        }
      }
    }
    int n;
    while ((n = ibv_poll_cq(b.cq, 64, wc)) > 0)
      for (int k = 0; k < n; ++k) {
        ++done;
        if (wc[k].status != IBV_WC_SUCCESS && bad_wc++ == 0)
          h_bad("a zero-length WRITE completed with %s", ibv_wc_status_str(wc[k].status));
      }
    if (n < 0) {
      h_bad("ibv_poll_cq failed under the storm (worker gone?)");
      break;
    }
  }
out:
  h_say("posted %lu zero-length WRITEs (%.0f/s), SQ full %lu times, %lu signaled completions, %lu bad",
        (unsigned long)posts, posts / (h_now() - h_t0), (unsigned long)full, (unsigned long)done,
        (unsigned long)bad_wc);
  return h_verdict();
}
