/* An outstanding RDMA READ whose memory goes away, on either end:
 *  responder: B reads 32 MiB from A's MR; 20 ms later A deregisters and frees it
 *             while its worker still streams the response;
 *  requester: B reads 32 MiB from A into its own MR and deregisters that sink
 *             20 ms later, while response packets still land in it (the buffer
 *             stays B's: it is overwritten right after the dereg returns, so a
 *             byte the worker places later shows).
 * Then both again with the other order of events after a churn of
 * registrations on the same PDs (so freed ranges get reused).
 *
 * Verbs: the READ completes (never hangs): successfully only with the right
 * bytes (the responder's dereg may have come after the response was read, or
 * returned EBUSY), else with an error (remote access, local protection,
 * flush). Once the requester's ibv_dereg_mr returned 0, nothing more is
 * written into its sink. ibv_dereg_mr answers 0 or EBUSY.
 *   dereg_read DEV_A DEV_B DIR SECONDS */
#include "hostile.h"

#define LEN (32u << 20)

static void fill(char* p, size_t n) {
  for (size_t i = 0; i < n; i += 4096) memset(p + i, (int)(i >> 12) & 0xff, 4096);
}

static int check(const char* p, size_t n) {
  for (size_t i = 0; i < n; i += 4096)
    if ((unsigned char)p[i] != ((i >> 12) & 0xff) || (unsigned char)p[i + 4095] != ((i >> 12) & 0xff)) return 0;
  return 1;
}

static void phase(struct ibv_context* ca, struct ibv_context* cb, int responder_side, int round) {
  struct h_end a, b;
  h_end_make(&a, ca, 64, 16);
  h_end_make(&b, cb, 64, 16);
  h_pair(&a, &b);
  char* src = h_alloc(LEN, 0);
  fill(src, LEN);
  char* sink = h_alloc(LEN, 0);
  struct ibv_mr* smr = ibv_reg_mr(a.pd, src, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  struct ibv_mr* kmr = ibv_reg_mr(b.pd, sink, LEN, IBV_ACCESS_LOCAL_WRITE);
  if (!smr || !kmr) h_die("ibv_reg_mr");
  const char* who = responder_side ? "responder" : "requester";
  if (h_post_send(b.qp, IBV_WR_RDMA_READ, 5, sink, LEN, kmr->lkey, (uintptr_t)src, smr->rkey, 1))
    h_die("post READ");
  usleep(20000);
  int rc;
  if (responder_side) {
    rc = ibv_dereg_mr(smr);
    if (rc == 0) {
      memset(src, 0xEE, LEN); /* what a late reader would see */
      free(src);
    }
  } else {
    rc = ibv_dereg_mr(kmr);
    if (rc == 0) memset(sink, 0xEE, LEN); /* any other byte later: written after the dereg */
  }
  h_say("round %d: %s dereg during a 32 MiB READ: %d (%s)", round, who, rc, h_errno_name(rc));
  if (rc != 0 && rc != EBUSY) h_bad("ibv_dereg_mr returned %d, neither 0 nor EBUSY", rc);
  h_churn(responder_side ? a.pd : b.pd, 8, LEN);
  struct ibv_wc wc;
  const int got = h_poll_one(b.cq, &wc, 10);
  if (got <= 0) {
    h_bad("round %d (%s): the READ never completed (%s)", round, who, got < 0 ? "poll failed" : "10 s");
  } else {
    h_say("round %d (%s): READ completion %s", round, who, ibv_wc_status_str(wc.status));
    if (wc.status == IBV_WC_SUCCESS && (responder_side || rc != 0) && !check(sink, LEN))
      h_bad("round %d (%s): a successful READ brought wrong bytes", round, who);
  }
  if (!responder_side && rc == 0) {
    usleep(200000); /* what was still on its way has landed */
    size_t written = 0;
    for (size_t i = 0; i < LEN; ++i) written += (unsigned char)sink[i] != 0xEE;
    if (written) h_bad("round %d: %zu bytes of the sink written after its ibv_dereg_mr returned", round, written);
  }
  ibv_destroy_qp(a.qp);
  ibv_destroy_qp(b.qp);
  if (responder_side) {
    if (rc != 0) ibv_dereg_mr(smr), free(src);
    ibv_dereg_mr(kmr);
    free(sink);
  } else {
    if (rc != 0) ibv_dereg_mr(kmr);
    free(sink);
    ibv_dereg_mr(smr);
    free(src);
  }
  ibv_destroy_cq(a.cq);
  ibv_destroy_cq(b.cq);
  ibv_dealloc_pd(a.pd);
  ibv_dealloc_pd(b.pd);
}

int main(int argc, char** argv) {
  h_init(argc, argv, "dereg_read", 0);
  struct ibv_context* ca = h_open(argv[1]);
  struct ibv_context* cb = h_open(argv[2]);
  h_ready();
  for (int r = 0; r < 2; ++r) {
    phase(ca, cb, 1, r);
    phase(ca, cb, 0, r);
  }
  while (!h_stop()) usleep(20000);
  return h_verdict();
}
