/* A deregisters the MR of a receive it has posted (keeping the buffer), lets
 * other MRs come and go on the same PD, then B sends into it
 * (../shared/findings/dereg_inflight.c without "send"), ROUNDS times on fresh
 * QPs (the finding crashed the worker in 3 runs of 5).
 *
 * Verbs: ibv_dereg_mr fails with EBUSY (the receive stays valid and completes
 * with B's bytes) or succeeds, and then the receive completes with an error
 * (local protection or flush) and the buffer is never written.
 *   dereg_recv DEV_A DEV_B DIR SECONDS [ROUNDS] */
#include "hostile.h"

#define LEN (1u << 20)

static void one_round(struct ibv_context* ca, struct ibv_context* cb, int round) {
  struct h_end a, b;
  h_end_make(&a, ca, 64, 16);
  h_end_make(&b, cb, 64, 16);
  h_pair(&a, &b);
  char* buf = h_alloc(LEN, 0);
  struct ibv_mr* mr = ibv_reg_mr(a.pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) h_die("ibv_reg_mr");
  if (h_post_recv(a.qp, 7, buf, LEN, mr->lkey)) h_die("ibv_post_recv");
  const int rc = ibv_dereg_mr(mr);
  h_say("round %d: dereg with a posted receive: %d (%s)", round, rc, h_errno_name(rc));
  if (rc != 0 && rc != EBUSY) h_bad("ibv_dereg_mr returned %d, neither 0 nor EBUSY", rc);
  usleep(150000);
  h_churn(a.pd, 50, LEN);
  usleep(100000);
  char* sb = h_alloc(65536, 0xAB);
  struct ibv_mr* smr = ibv_reg_mr(b.pd, sb, 65536, IBV_ACCESS_LOCAL_WRITE);
  if (!smr) h_die("ibv_reg_mr (send)");
  if (h_post_send(b.qp, IBV_WR_SEND, 9, sb, 65536, smr->lkey, 0, 0, 1)) h_die("ibv_post_send");
  struct ibv_wc wc;
  const int got = h_poll_one(a.cq, &wc, 5);
  if (got <= 0) {
    h_bad("round %d: the receive on the deregistered MR never completed (%s)", round,
          got < 0 ? "poll failed" : "no completion in 5 s");
  } else {
    h_say("round %d: receive completion: %s", round, ibv_wc_status_str(wc.status));
    if (rc == 0 && wc.status == IBV_WC_SUCCESS) h_bad("round %d: a receive on a deregistered MR succeeded", round);
    if (rc == EBUSY && wc.status != IBV_WC_SUCCESS) h_bad("round %d: the kept MR's receive failed", round);
  }
  if (rc == 0)
    for (size_t i = 0; i < LEN; ++i)
      if (buf[i] != 0) {
        h_bad("round %d: the worker wrote byte %zu of memory deregistered before the message came", round, i);
        break;
      }
  /* The sender's fate is its own (NAKed, or the receiver's QP in error): only drain it. */
  h_poll_one(b.cq, &wc, 1);
  ibv_destroy_qp(a.qp);
  ibv_destroy_qp(b.qp);
  ibv_dereg_mr(smr);
  if (rc == EBUSY) ibv_dereg_mr(mr);
  ibv_destroy_cq(a.cq);
  ibv_destroy_cq(b.cq);
  ibv_dealloc_pd(a.pd);
  ibv_dealloc_pd(b.pd);
  free(buf);
  free(sb);
}

int main(int argc, char** argv) {
  h_init(argc, argv, "dereg_recv", 0);
  const int rounds = argc > 5 ? atoi(argv[5]) : 5;
  struct ibv_context* ca = h_open(argv[1]);
  struct ibv_context* cb = h_open(argv[2]);
  h_ready();
  for (int r = 0; r < rounds; ++r) one_round(ca, cb, r);
  while (!h_stop()) usleep(20000);
  return h_verdict();
}
