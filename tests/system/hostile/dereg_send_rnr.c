/* The finding (../shared/findings/dereg_inflight.c, "send"): B posts an 8 MiB
 * SEND that A cannot take (no receive posted: RNR NAKs, retried forever),
 * deregisters and frees that MR while the worker retries it, registers and
 * frees other 8 MiB buffers, then A posts its receive.
 *
 * Verbs: ibv_dereg_mr either fails with EBUSY (the MR stays, the SEND then
 * completes and A gets the bytes) or succeeds, and then the SEND completes
 * with an error (flush, local protection) and nothing more is read from the
 * memory: A's receive never completes successfully from it. Whatever the
 * worker does, it survives (the runner checks).
 *   dereg_send_rnr DEV_A DEV_B DIR SECONDS */
#include "hostile.h"

#define LEN (8u << 20)

int main(int argc, char** argv) {
  h_init(argc, argv, "dereg_send_rnr", 0);
  struct h_end a, b;
  h_end_make(&a, h_open(argv[1]), 64, 16);
  h_end_make(&b, h_open(argv[2]), 64, 16);
  h_pair(&a, &b);
  char* sb = h_alloc(LEN, 0xAB);
  struct ibv_mr* smr = ibv_reg_mr(b.pd, sb, LEN, IBV_ACCESS_LOCAL_WRITE);
  if (!smr) h_die("ibv_reg_mr");
  if (h_post_send(b.qp, IBV_WR_SEND, 9, sb, LEN, smr->lkey, 0, 0, 1)) h_die("ibv_post_send");
  h_ready();
  usleep(50000);
  const int rc = ibv_dereg_mr(smr);
  h_say("dereg of the MR of a SEND under RNR: %d (%s)", rc, h_errno_name(rc));
  if (rc == 0) {
    memset(sb, 0x5A, LEN); /* what it would read if it still read the buffer */
    free(sb);
  } else if (rc != EBUSY) {
    h_bad("ibv_dereg_mr returned %d, neither 0 nor EBUSY", rc);
  }
  usleep(400000);
  h_churn(b.pd, 50, LEN);
  char* rb = h_alloc(LEN, 0);
  struct ibv_mr* rmr = ibv_reg_mr(a.pd, rb, LEN, IBV_ACCESS_LOCAL_WRITE);
  if (!rmr) h_die("ibv_reg_mr (receive)");
  if (h_post_recv(a.qp, 7, rb, LEN, rmr->lkey)) h_die("ibv_post_recv");
  struct ibv_wc wc;
  int send_done = 0, recv_done = 0;
  const double end = h_now() + 10;
  while (h_now() < end && !(send_done && (recv_done || rc == 0))) {
    if (!send_done && ibv_poll_cq(b.cq, 1, &wc) > 0) {
      send_done = 1;
      h_say("send completion: %s", ibv_wc_status_str(wc.status));
      if (rc == 0 && wc.status == IBV_WC_SUCCESS)
        h_bad("the SEND of a deregistered MR completed successfully (read after ibv_dereg_mr returned)");
      if (rc == EBUSY && wc.status != IBV_WC_SUCCESS)
        h_bad("dereg said EBUSY (the MR stays) but the SEND failed: %s", ibv_wc_status_str(wc.status));
    }
    if (!recv_done && ibv_poll_cq(a.cq, 1, &wc) > 0) {
      recv_done = 1;
      h_say("receive completion: %s, first byte 0x%02x", ibv_wc_status_str(wc.status), (unsigned char)rb[0]);
      if (rc == 0 && wc.status == IBV_WC_SUCCESS)
        h_bad("A received the message of a deregistered, freed MR (bytes 0x%02x)", (unsigned char)rb[4096]);
      if (rc == EBUSY && (wc.status != IBV_WC_SUCCESS || (unsigned char)rb[4096] != 0xAB))
        h_bad("the kept MR's SEND arrived wrong: %s, 0x%02x", ibv_wc_status_str(wc.status), (unsigned char)rb[4096]);
    }
    usleep(1000);
  }
  if (!send_done) h_bad("the SEND never completed (no flush, no error) within 10 s");
  if (rc == EBUSY && !recv_done) h_bad("the kept MR's SEND never arrived");
  while (!h_stop()) usleep(20000);
  return h_verdict();
}
