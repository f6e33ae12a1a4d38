/* CQs nobody polls, and flushes into them: in rounds until stopped, 8 QP
 * pairs whose CQs hold 16 completions each; every QP posts 64 signaled 4 KiB
 * WRITEs and 64 receives, and nothing is ever polled. Then every QP is moved
 * to ERR, which flushes what it still holds into the full CQs, and all of it
 * is destroyed and made again.
 *
 * Verbs (and rnic/verbs README, "CQ overrun"): a completion that finds its CQ
 * full puts the CQ in error and its QP in ERR (ibv_query_qp says so), and
 * ibv_poll_cq fails once the CQ is drained; nothing of it reaches anyone
 * else's CQ. Every verb answers (no hang).
 *   cq_never_polled DEV_A DEV_B DIR SECONDS */
#include "hostile.h"

#define PAIRS 8

int main(int argc, char** argv) {
  h_init(argc, argv, "cq_never_polled", 0);
  struct ibv_context* ca = h_open(argv[1]);
  struct ibv_context* cb = h_open(argv[2]);
  struct ibv_pd* pa = ibv_alloc_pd(ca);
  struct ibv_pd* pb = ibv_alloc_pd(cb);
  if (!pa || !pb) h_die("ibv_alloc_pd");
  char* buf = h_alloc(1 << 20, 0x33);
  struct ibv_mr* ma = ibv_reg_mr(pa, buf, 1 << 20, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  char* bbuf = h_alloc(1 << 20, 0x44);
  struct ibv_mr* mb = ibv_reg_mr(pb, bbuf, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
  if (!ma || !mb) h_die("ibv_reg_mr");
  union ibv_gid ga, gb;
  if (ibv_query_gid(ca, 1, 0, &ga) || ibv_query_gid(cb, 1, 0, &gb)) h_die("ibv_query_gid");
  int rounds = 0, overrun_err = 0, poll_failed = 0;
  h_ready();
  while (!h_stop()) {
    struct ibv_cq *cqa[PAIRS], *cqb[PAIRS];
    struct ibv_qp *qa[PAIRS], *qb[PAIRS];
    for (int i = 0; i < PAIRS; ++i) {
      cqa[i] = ibv_create_cq(ca, 16, NULL, NULL, 0);
      cqb[i] = ibv_create_cq(cb, 16, NULL, NULL, 0);
      if (!cqa[i] || !cqb[i]) h_die("ibv_create_cq");
      qa[i] = h_qp(pa, cqa[i], 128, NULL);
      qb[i] = h_qp(pb, cqb[i], 128, NULL);
      if (!qa[i] || !qb[i]) h_die("ibv_create_qp");
      if (h_connect_qp(qa[i], qb[i]->qp_num, &gb) || h_connect_qp(qb[i], qa[i]->qp_num, &ga)) h_die("connect");
      for (int k = 0; k < 64; ++k) {
        h_post_recv(qa[i], (uint64_t)k, buf + 4096 * (k % 64), 4096, ma->lkey);
        h_post_recv(qb[i], (uint64_t)k, bbuf + 4096 * (k % 64), 4096, mb->lkey);
        h_post_send(qb[i], IBV_WR_RDMA_WRITE, (uint64_t)k, bbuf + 4096 * (k % 64), 4096, mb->lkey,
                    (uintptr_t)buf + 4096 * (k % 64), ma->rkey, 1);
      }
    }
    /* The completions pile up against the 16-entry CQs: every sending QP must end in ERR. */
    int in_err = 0;
    for (const double end = h_now() + 3; in_err < PAIRS && h_now() < end; usleep(20000)) {
      in_err = 0;
      for (int i = 0; i < PAIRS; ++i) {
        struct ibv_qp_attr at;
        struct ibv_qp_init_attr ia;
        in_err += ibv_query_qp(qb[i], &at, IBV_QP_STATE, &ia) == 0 && at.qp_state == IBV_QPS_ERR;
      }
    }
    overrun_err += in_err;
    for (int i = 0; i < PAIRS; ++i) {
      struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
      ibv_modify_qp(qa[i], &err, IBV_QP_STATE); /* flushes its 64 receives into a full CQ */
      ibv_modify_qp(qb[i], &err, IBV_QP_STATE);
    }
    usleep(20000);
    for (int i = 0; i < PAIRS; ++i) {
      struct ibv_wc wc[32];
      int n, drained = 0;
      while ((n = ibv_poll_cq(cqb[i], 32, wc)) > 0 && drained < 4096) drained += n;
      if (n < 0) ++poll_failed;
      if (ibv_destroy_qp(qa[i]) || ibv_destroy_qp(qb[i])) h_bad("ibv_destroy_qp failed");
      if (ibv_destroy_cq(cqa[i]) || ibv_destroy_cq(cqb[i])) h_bad("ibv_destroy_cq failed");
    }
    ++rounds;
  }
  h_say("%d rounds of %d pairs: %d sending QPs found in ERR after their CQ overran, %d CQs failed ibv_poll_cq "
        "once drained",
        rounds, PAIRS, overrun_err, poll_failed);
  if (overrun_err != rounds * PAIRS)
    h_bad("only %d of %d QPs whose CQ overran went to ERR within 3 s", overrun_err, rounds * PAIRS);
  if (poll_failed != rounds * PAIRS)
    h_bad("only %d of %d overrun CQs failed ibv_poll_cq once drained", poll_failed, rounds * PAIRS);
  return h_verdict();
}
