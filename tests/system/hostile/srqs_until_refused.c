/* SRQs until refused: on A, SRQs of 1024 entries are created until the
 * worker refuses one (the port's transport holds 64, shared by every tenant),
 * 9 more are tried, and they are held until stopped.
 *   srqs_until_refused DEV_A DEV_B DIR SECONDS
 * Verbs: a clean errno, EAGAIN (the vNIC's share) or ENOMEM (the device's
 * room), the same each time; freeing one lets one more in; an RC QP on one
 * of them still works.
 *
 *   srqs_until_refused DEV DEV DIR 0 probe
 * The victim's side: one SRQ and a QP on it on DEV, while the hostile tenant
 * holds its SRQs. Exit 0 if both are created (and one receive posted). */
#include "hostile.h"

#define CAP 1024
#define EXTRA 9

static struct ibv_srq* make_srq(struct ibv_pd* pd) {
  struct ibv_srq_init_attr a;
  memset(&a, 0, sizeof a);
  a.attr.max_wr = 1024;
  a.attr.max_sge = 1;
  return ibv_create_srq(pd, &a);
}

int main(int argc, char** argv) {
  const int probe = argc > 5 && strcmp(argv[5], "probe") == 0;
  h_init(argc, argv, probe ? "srq_probe" : "srqs_until_refused", 0);
  struct ibv_context* ca = h_open(argv[1]);
  struct ibv_pd* pd = ibv_alloc_pd(ca);
  struct ibv_cq* cq = ibv_create_cq(ca, 64, NULL, NULL, 0);
  if (!pd || !cq) h_die("pd/cq");
  char* buf = h_alloc(4096, 0);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) h_die("ibv_reg_mr");
  if (probe) {
    struct ibv_srq* s = make_srq(pd);
    if (!s) {
      h_bad("the victim's SRQ was refused: %s", h_errno_name(errno));
      return h_verdict();
    }
    struct ibv_qp* q = h_qp(pd, cq, 16, s);
    struct ibv_sge sg = {(uintptr_t)buf, 4096, mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sg, .num_sge = 1}, *bad;
    if (!q || ibv_post_srq_recv(s, &wr, &bad)) h_bad("the victim's QP on its SRQ: %s", h_errno_name(errno));
    union ibv_gid peer;
    if (ibv_query_gid(ca, 1, 0, &peer)) h_die("ibv_query_gid");
    peer.raw[15] ^= 3; /* its tenant's other vNIC: 192.168.7.1 <-> 192.168.7.2 */
    struct ibv_qp_attr at;
    struct ibv_qp_init_attr ia;
    if (q && (h_connect_qp(q, 0x1234, &peer) || ibv_query_qp(q, &at, IBV_QP_STATE, &ia) || at.qp_state != IBV_QPS_RTS))
      h_bad("the victim's QP on its SRQ is not in RTS (the worker's transport had no SRQ for it?)");
    h_say("the victim created an SRQ and a QP on it while the hostile tenant held its SRQs");
    if (q) ibv_destroy_qp(q);
    ibv_destroy_srq(s);
    return h_verdict();
  }
  static struct ibv_srq* srqs[CAP];
  int n = 0, refused = 0, first_errno = 0, same = 1;
  for (int i = 0; i < CAP && refused <= EXTRA; ++i) {
    errno = 0;
    struct ibv_srq* s = make_srq(pd);
    if (s) {
      if (refused) h_bad("an SRQ was created after the first refusal");
      srqs[n++] = s;
      continue;
    }
    if (refused++ == 0) first_errno = errno;
    else same = same && errno == first_errno;
  }
  h_say("%d SRQs created, then %d refused with %s%s", n, refused, h_errno_name(first_errno),
        same ? "" : " (then other errnos)");
  if (refused == 0) h_bad("%d SRQs and no refusal", n);
  if (refused && first_errno != EAGAIN && first_errno != ENOMEM)
    h_bad("refused with %s, not EAGAIN or ENOMEM", h_errno_name(first_errno));
  if (!same) h_bad("later refusals had another errno");
  if (n >= 64) h_bad("one tenant got %d SRQs: all the port's transport has", n);
  if (n > 0) {
    ibv_destroy_srq(srqs[--n]);
    srqs[n] = make_srq(pd);
    if (!srqs[n]) h_bad("freeing one SRQ did not let one more in: %s", h_errno_name(errno));
    else ++n;
    /* An RC QP on an SRQ this tenant holds: the worker gave it a real one. */
    struct ibv_qp* q = n ? h_qp(pd, cq, 16, srqs[0]) : NULL;
    struct ibv_qp_attr at;
    struct ibv_qp_init_attr ia;
    union ibv_gid peer;
    if (ibv_query_gid(ca, 1, 0, &peer)) h_die("ibv_query_gid");
    peer.raw[15] ^= 3; /* its tenant's other vNIC */
    if (n && (!q || h_connect_qp(q, 0x1234, &peer) || ibv_query_qp(q, &at, IBV_QP_STATE, &ia) ||
              at.qp_state != IBV_QPS_RTS))
      h_bad("an RC QP on a granted SRQ is not in RTS");
    if (q) ibv_destroy_qp(q);
  }
  h_ready();
  while (!h_stop()) usleep(20000);
  for (int i = 0; i < n; ++i) ibv_destroy_srq(srqs[i]);
  return h_verdict();
}
